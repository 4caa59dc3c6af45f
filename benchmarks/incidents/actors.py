"""Incidents on plain Ray actors that form one gloo group (`Rank`, 4 of them, 1 CPU each)."""

from __future__ import annotations

import os
import time
from functools import partial
from typing import Any

from incidents import train
from incidents.common import (
    FAULT_RANK,
    WORLD,
    Expected,
    Incident,
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
    *, timeout_s: float = 600.0, env_of: dict[int, dict[str, str]] | None = None
) -> list[Any]:
    """Four `Rank` actors joined in one gloo group (`env_of`: extra variables of some ranks)."""
    import ray

    cls = ray.remote(num_cpus=1)(Rank)
    actors = []
    for rank in range(WORLD):
        options: dict[str, Any] = {}
        if env_of and rank in env_of:
            options["runtime_env"] = {"env_vars": env_of[rank]}
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
    env_of: dict[int, dict[str, str]] | None = None,
) -> None:
    """The user's driver: start the ranks, train, wait for every rank (as users write it)."""
    import ray

    actors = start_group(timeout_s=timeout_s, env_of=env_of)
    ray.get([a.train.remote(job_dir, fault, faulty) for a in actors])


def run_infeasible(job_dir: str) -> None:
    """Training, and an evaluator actor asking for more CPUs than any node has."""
    import ray

    actors = start_group()
    runs = [a.train.remote(job_dir, "", FAULT_RANK) for a in actors]
    time.sleep(6)
    mark_symptom(job_dir)
    evaluator = ray.remote(num_cpus=64)(Evaluator).remote()  # incident: infeasible
    ray.get(runs)
    ray.get(evaluator.ping.remote())


def _fault(fault: str, kinds: tuple[str, ...], *, where: bool = True, **kw: Any) -> Incident:
    path = os.path.join(os.path.dirname(__file__), "train.py")
    return Incident(
        name=f"{CLIENT}-{fault}",
        client=CLIENT,
        description=f"{fault} on rank {FAULT_RANK}",
        run=partial(run_group, fault=fault, **kw),
        expected=Expected(kinds, (FAULT_RANK,), where_of(path, fault) if where else ""),
    )


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
    _fault("leak", ("leak",)),
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
        description=f"rank {FAULT_RANK} runs with its own GLOO_SOCKET_IFNAME and NCCL_ALGO",
        run=partial(
            run_group,
            fault="env_skew",
            env_of={FAULT_RANK: {"NCCL_ALGO": "Tree", "TORCH_NCCL_BLOCKING_WAIT": "1"}},
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
]
"""In the order they were built: every client's first six, then the plain actors' own."""
