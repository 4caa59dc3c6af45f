"""The cluster view: every rank's memory and verdicts, least headroom first.

Processes without a rank (Ray Train's controller, verl's driver-side actors) come after the
ranks, apart: they are not part of the training group the table compares.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from rankscope.memory.analysis.verdicts import (
    Finding,
    MemoryThresholds,
    snapshot_findings,
)
from rankscope.memory.model import LeakFinding, MemorySnapshot


@dataclass(frozen=True)
class RankMemory:
    """One rank's row of `rankscope memory`."""

    label: str
    rank: int | None
    node: str
    pid: int
    snapshot: MemorySnapshot | None
    leaks: tuple[LeakFinding, ...] = ()
    """From the rank's MemoryProfiler, when it runs one."""
    error: str = ""
    """Why there is no snapshot (no answer, dead process)."""
    findings: tuple[Finding, ...] = ()
    group: str | None = None
    """The group of ranks it belongs to (a job may hold several: verl's worker groups)."""
    host_used_fraction: float | None = field(init=False)
    device_used_fraction: float | None = field(init=False)
    headroom: float | None = field(init=False)
    """The smaller free fraction of the node's RAM and of the device."""

    def __post_init__(self) -> None:
        s = self.snapshot
        host = s.node_used / s.node_total if s is not None and s.node_total else None
        device = None
        if s is not None and s.cuda is not None and s.cuda.device_total:
            device = s.cuda.device_used / s.cuda.device_total
        used = [u for u in (host, device) if u is not None]
        object.__setattr__(self, "host_used_fraction", host)
        object.__setattr__(self, "device_used_fraction", device)
        object.__setattr__(self, "headroom", 1.0 - max(used) if used else None)


@dataclass(frozen=True)
class ClusterMemory:
    job_id: str
    ranks: tuple[RankMemory, ...]
    """Ranks first, then processes without a rank; each least headroom first, no snapshot last."""

    @property
    def alerts(self) -> tuple[tuple[RankMemory, Finding], ...]:
        return tuple((r, f) for r in self.ranks for f in r.findings)

    @property
    def leaking(self) -> tuple[RankMemory, ...]:
        return tuple(r for r in self.ranks if any(f.leak for f in r.leaks))

    @property
    def missing(self) -> tuple[RankMemory, ...]:
        return tuple(r for r in self.ranks if r.snapshot is None)

    @property
    def has_findings(self) -> bool:
        return bool(self.alerts or self.leaking or self.missing)


def cluster_view(
    job_id: str, ranks: Sequence[RankMemory], thresholds: MemoryThresholds | None = None
) -> ClusterMemory:
    """Rows with their findings: ranks, then rank-less processes, each by headroom (least first)."""
    rows = [
        replace(
            r, findings=snapshot_findings(r.snapshot, thresholds) if r.snapshot is not None else ()
        )
        for r in ranks
    ]
    rows.sort(
        key=lambda r: (
            r.rank is None,
            r.headroom is None,
            round(r.headroom or 0.0, 2),  # ranks within a percent keep their rank order
            r.rank is None,
            r.rank or 0,
        )
    )
    return ClusterMemory(job_id, tuple(rows))
