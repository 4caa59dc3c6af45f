"""Incidents on Ray Train's TorchTrainer: 4 CPU workers on gloo, the user's loop unchanged in
`train_loop_per_worker` (which Ray Train runs in a thread of its own)."""

from __future__ import annotations

import os
from functools import partial
from typing import Any

from rankscope.demo.incidents import train
from rankscope.demo.incidents.common import FAULT_RANK, WORLD, Incident, fault_incident

CLIENT = "raytrain"


def loop(config: dict[str, Any]) -> None:
    """train_loop_per_worker."""
    import ray.train

    context = ray.train.get_context()
    train.run(
        context.get_world_rank(),
        context.get_world_size(),
        config["job_dir"],
        config["fault"],
        faulty=config["faulty"],
    )


def run_fault(job_dir: str, *, fault: str, faulty: int = FAULT_RANK) -> None:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    trainer = TorchTrainer(
        loop,
        train_loop_config={"job_dir": job_dir, "fault": fault, "faulty": faulty},
        scaling_config=ScalingConfig(num_workers=WORLD, use_gpu=False),
        run_config=RunConfig(storage_path=os.path.join(job_dir, "ray_results")),
    )
    trainer.fit()


def _fault(fault: str, kinds: tuple[str, ...], *, where: bool = True) -> Incident:
    who, run = f"world rank {FAULT_RANK}", partial(run_fault, fault=fault)
    return fault_incident(CLIENT, who, fault, train.FAULTS[fault], run, kinds, where)


INCIDENTS: list[Incident] = [
    _fault("exception", ("exception",)),
    _fault("stall_loader", ("hang",)),
    _fault("sigkill", ("death",), where=False),
    _fault("extra_collective", ("mismatch", "hang")),
    _fault("shape", ("mismatch",)),
    _fault("straggler", ("straggler",)),
    _fault("stall_lock", ("hang",)),
    _fault("exit", ("death",), where=False),
]
