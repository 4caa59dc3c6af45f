"""Incidents on plain Ray actors that form one gloo group (`Rank`, 4 of them, 1 CPU each)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from functools import partial
from typing import Any

from rankscope.demo.incidents import train
from rankscope.demo.incidents.common import (
    FAULT_RANK,
    NODE_RESOURCE,
    WORLD,
    Expected,
    Incident,
    fault_incident,
    free_port,
    join_gloo,
    mark_symptom,
    where_of,
)

CLIENT = "actors"


class Rank:
    """One data-parallel rank: joins the gloo group, then runs the user's training loop."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world

    def address(self) -> tuple[str, int]:
        return free_port()

    def join(self, host: str, port: int, timeout_s: float) -> None:
        join_gloo(host, port, self.rank, self.world, timeout_s)

    def train(self, job_dir: str, fault: str, faulty: int) -> int:
        return train.run(self.rank, self.world, job_dir, fault, faulty=faulty)


class Evaluator:
    """A helper actor the driver starts beside the group (the infeasible incident's)."""

    def ping(self) -> str:
        return "ok"


def start_group(
    *, timeout_s: float = 600.0, options_of: dict[int, dict[str, Any]] | None = None
) -> list[Any]:
    """Four `Rank` actors joined in one gloo group (`options_of`: some ranks' actor options)."""
    import ray

    cls: Any = ray.remote(num_cpus=1)(Rank)
    actors = []
    for rank in range(WORLD):
        options = (options_of or {}).get(rank, {})
        actors.append(cls.options(**options).remote(rank, WORLD))
    host, port = ray.get(actors[0].address.remote())
    ray.get([a.join.remote(host, port, timeout_s) for a in actors])
    return actors


def run_group(
    job_dir: str,
    *,
    fault: str,
    faulty: int = FAULT_RANK,
    timeout_s: float = 600.0,
    options_of: dict[int, dict[str, Any]] | None = None,
) -> None:
    """The user's driver: start the ranks, train, wait for every rank (as users write it)."""
    import ray

    actors = start_group(timeout_s=timeout_s, options_of=options_of)
    ray.get([a.train.remote(job_dir, fault, faulty) for a in actors])


def run_infeasible(job_dir: str) -> None:
    """Training, and an evaluator actor asking for more CPUs than any node has."""
    import ray

    actors = start_group()
    runs = [a.train.remote(job_dir, "", FAULT_RANK) for a in actors]
    time.sleep(6)
    mark_symptom(job_dir)
    evaluator_cls: Any = ray.remote(num_cpus=64)(Evaluator)
    evaluator = evaluator_cls.remote()  # incident: infeasible
    ray.get(runs)
    ray.get(evaluator.ping.remote())


class Holder:
    """Another job's actor that holds most of the cluster's CPUs and keeps them."""

    def ping(self) -> str:
        return "ok"


def hold_cpus(address: str, job_dir: str) -> None:
    """Another user's job (`python -m rankscope.demo.incidents.actors ADDRESS JOB_DIR`): an
    actor holding all but 2 of the cluster's CPUs, until it is killed."""
    import ray

    ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    cpus = int(ray.available_resources().get("CPU", 0)) - 2
    holder_cls: Any = ray.remote(num_cpus=cpus)(Holder)
    holder = holder_cls.remote()
    ray.get(holder.ping.remote())
    with open(os.path.join(job_dir, "holder_ready"), "w") as f:
        f.write(str(cpus))
    while True:
        time.sleep(60)


def run_waiting(job_dir: str) -> None:
    """This job's four ranks wait for CPUs that another job's `Holder` holds."""
    import ray

    address = ray.get_runtime_context().gcs_address
    subprocess.Popen([sys.executable, "-m", "rankscope.demo.incidents.actors", address, job_dir])
    ready = os.path.join(job_dir, "holder_ready")
    while not os.path.exists(ready):
        time.sleep(0.2)
    mark_symptom(job_dir)
    run_group(job_dir, fault="")


def _fault(fault: str, kinds: tuple[str, ...], *, where: bool | str = True, **kw: Any) -> Incident:
    who, run = f"rank {FAULT_RANK}", partial(run_group, fault=fault, **kw)
    return fault_incident(CLIENT, who, fault, train.FAULTS[fault], run, kinds, where)


SKEWED = {"NCCL_ALGO": "Tree", "TORCH_NCCL_BLOCKING_WAIT": "1"}
HANG = ("hang",)
MISMATCH = ("mismatch", "hang")
"""An extra or odd collective: gloo may hang in it or fail; the verdict must call it a mismatch
(a hang naming the rank and line is accepted)."""

INCIDENTS: list[Incident] = [
    _fault("exception", ("exception",)),
    _fault("stall_loader", HANG),
    _fault("sigkill", ("death",), where=False),
    _fault("extra_collective", MISMATCH),
    _fault("shape", ("mismatch",)),
    _fault("straggler", ("straggler",)),
    _fault("nan", ("nan",), where=False),
    _fault("loss_spike", ("loss_spike",), where=False),
    _fault("divergence", ("divergence",), where=False),
    _fault("leak", ("leak",), where="rss"),
    Incident(
        name=f"{CLIENT}-infeasible",
        client=CLIENT,
        description="an Evaluator actor asks for 64 CPUs",
        run=run_infeasible,
        expected=Expected(("infeasible",), (), "CPU", culprit="Evaluator"),
    ),
    _fault("breakpoint", ("breakpoint",)),
    _fault("error_burst", ("error_burst",)),
    Incident(
        name=f"{CLIENT}-env_skew",
        client=CLIENT,
        description=f"rank {FAULT_RANK} runs with its own NCCL_ALGO and TORCH_NCCL_BLOCKING_WAIT",
        run=partial(
            run_group,
            fault="env_skew",
            options_of={FAULT_RANK: {"runtime_env": {"env_vars": SKEWED}}},
        ),
        expected=Expected(("environment",), (FAULT_RANK,), "NCCL_ALGO"),
    ),
    _fault("stall_lock", HANG),
    _fault("stall_queue", HANG),
    _fault("stall_child", HANG),
    _fault("stall_ray_get", HANG),
    _fault("exit", ("death",), where=False),
    _fault("dtype", ("mismatch",)),
    _fault("kind", ("mismatch",)),
    _fault("spin", HANG),
    _fault("straggler_data", ("straggler",)),
    _fault("drift", ("throughput_drift", "straggler")),
    Incident(
        name=f"{CLIENT}-timeout",
        client=CLIENT,
        description="rank 2 stalls in its loader; the group's 15 s collective timeout fires",
        run=partial(run_group, fault="stall_loader", timeout_s=15.0),
        expected=Expected(
            ("collective_failed", "hang"),
            (FAULT_RANK,),
            where_of(os.path.join(os.path.dirname(__file__), "train.py"), "stall_loader"),
        ),
    ),
    _fault("loss_divergence", ("loss_divergence", "divergence"), where=False),
    _fault("cross_group", ("cross_group_deadlock", "hang")),
    _fault("oom", ("oom", "death"), where=False),
    Incident(
        name=f"{CLIENT}-node_lost",
        client=CLIENT,
        description=f"rank {FAULT_RANK}'s node is removed from the cluster",
        run=partial(
            run_group,
            fault="node_lost",
            options_of={FAULT_RANK: {"resources": {NODE_RESOURCE: 1}}},
        ),
        expected=Expected(("death",), (FAULT_RANK,)),
        node=True,
    ),
    Incident(
        name=f"{CLIENT}-waiting",
        client=CLIENT,
        description="the ranks wait for CPUs another job's Holder actor holds",
        run=run_waiting,
        expected=Expected(("waiting",), (), "CPU", culprit="Holder"),
    ),
]
"""In the order they were built: every client's first six, then the plain actors' own."""


if __name__ == "__main__":
    hold_cpus(*sys.argv[1:3])
