"""Incidents on verl's single controller: a RayWorkerGroup of a `Worker` (verl 0.9.1, CPU,
gloo), its ONE_TO_ALL method running the user's training loop on each of the 4 workers."""

from __future__ import annotations

import os
import time
from functools import partial
from typing import Any

from rankscope.demo.incidents import train
from rankscope.demo.incidents.common import (
    FAULT_RANK,
    WORLD,
    Expected,
    Incident,
    fault_incident,
    stopped,
    where_of,
)

CLIENT = "verl"
IDLE_S = 60.0
"""verl-style idle: no step and no collective between the controller's calls."""


def worker_class() -> type:
    """The user's verl Worker, built after verl is imported (verl is only in workers' paths)."""
    import torch.distributed as dist
    from verl.single_controller.base import Worker
    from verl.single_controller.base.decorator import Dispatch, register

    class TrainWorker(Worker):
        def __init__(self) -> None:
            super().__init__()
            dist.init_process_group("gloo")

        @register(dispatch_mode=Dispatch.ONE_TO_ALL)  # type: ignore[attr-defined]
        def train(self, job_dir: str, fault: str, faulty: int, steps: int | None) -> int:
            rank, world = dist.get_rank(), dist.get_world_size()
            return train.run(rank, world, job_dir, fault, faulty=faulty, steps=steps)

    return TrainWorker


def worker_group() -> Any:
    import ray
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    pool = RayResourcePool(process_on_nodes=[WORLD], use_gpu=False, max_colocate_count=1)
    return RayWorkerGroup(
        pool, RayClassWithInitArgs(cls=ray.remote(worker_class())), device_name="cpu"
    )


def run_fault(job_dir: str, *, fault: str, faulty: int = FAULT_RANK) -> None:
    """The driver as verl's trainers write it: one blocking call on the worker group."""
    worker_group().train(job_dir, fault, faulty, None)


class TaskRunner:
    """verl's controller actor (main_ppo's TaskRunner): it builds the worker group and calls
    it; the `python -m` driver only waits for it in `ray.get`."""

    def run(self, job_dir: str, fault: str) -> None:
        worker_group().train(job_dir, fault, FAULT_RANK, None)


def run_controller(job_dir: str, *, fault: str) -> None:
    import ray

    runner_cls: Any = ray.remote(num_cpus=1)(TaskRunner)
    runner = runner_cls.remote()
    ray.get(runner.run.remote(job_dir, fault))


def run_idle(job_dir: str) -> None:
    """Healthy: 20 steps, then 60 s with no call, again and again (a rollout phase elsewhere)."""
    workers = worker_group()
    while not stopped(job_dir):
        workers.train(job_dir, "", FAULT_RANK, 20)
        deadline = time.time() + IDLE_S
        while time.time() < deadline and not stopped(job_dir):
            time.sleep(0.5)


def _fault(fault: str, kinds: tuple[str, ...], *, where: bool = True) -> Incident:
    who, run = f"worker {FAULT_RANK}", partial(run_fault, fault=fault)
    return fault_incident(CLIENT, who, fault, train.FAULTS[fault], run, kinds, where)


INCIDENTS: list[Incident] = [
    _fault("exception", ("exception",)),
    _fault("stall_loader", ("hang",)),
    _fault("sigkill", ("death",), where=False),
    _fault("extra_collective", ("mismatch", "hang")),
    _fault("shape", ("mismatch",)),
    _fault("straggler", ("straggler",)),
    _fault("stall_ray_get", ("hang",)),
    _fault("exit", ("death",), where=False),
    Incident(
        name=f"{CLIENT}-controller",
        client=CLIENT,
        description="verl's TaskRunner waits in a worker-group call; worker 2 stalls in its loader",
        run=partial(run_controller, fault="stall_loader"),
        expected=Expected(
            ("hang",),
            (FAULT_RANK,),
            where_of(os.path.join(os.path.dirname(__file__), "train.py"), "stall_loader"),
        ),
    ),
]
