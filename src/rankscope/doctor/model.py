"""What the doctor reports: each process's environment facts, and what differs between them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rankscope.serialize import by_job

__all__ = [
    "EnvironmentDiagnosis",
    "EnvironmentFacts",
    "EnvironmentFinding",
    "JobEnvironment",
    "ProcessFacts",
]


@dataclass(frozen=True)
class EnvironmentFacts:
    python: str
    platform: str
    rankscope: str
    ray: str
    torch: str | None
    cuda: str | None
    nccl: str | None
    gpus: tuple[str, ...]
    shm_total_bytes: int | None
    shm_free_bytes: int | None
    variables: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ProcessFacts:
    label: str
    """`rank 3` or `pid 1234@host`."""
    hostname: str
    facts: EnvironmentFacts
    rank: int | None = None
    """None for a process without a rank (Ray Train's controller, verl's driver-side actors):
    listed, never compared."""
    group: str | None = None
    """The group the rank belongs to (`host:port` of its rendezvous); ranks compare within it."""


@dataclass(frozen=True)
class EnvironmentFinding:
    what: str
    """The fact or variable, e.g. `torch` or `NCCL_SOCKET_IFNAME`."""
    message: str
    odd_ones: tuple[str, ...]
    group: str | None = None
    """The group of ranks compared, when the finding is about one (None for /dev/shm)."""


@dataclass(frozen=True)
class JobEnvironment:
    """One job's environments (ranks first, then processes without a rank), what differs
    between the ranks, and who did not answer."""

    job_id: str
    processes: list[ProcessFacts]
    findings: list[EnvironmentFinding]
    unanswered: list[str]


@dataclass(frozen=True)
class EnvironmentDiagnosis:
    """`rankscope diagnose`: every selected job's environments; its JSON is keyed by job id."""

    jobs: tuple[JobEnvironment, ...]
    saved: tuple[str, ...] = field(default=(), metadata={"json": False})
    """Where each job's copy went in its run directory (for `rankscope report`)."""

    def json_data(self) -> dict[str, Any]:
        return by_job(self.jobs)
