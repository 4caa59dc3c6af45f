"""Synthetic registry rows (no Ray) at a fixed clock, for tests that render what a user reads."""

from __future__ import annotations

from rankscope.context import RankContext
from rankscope.runtime.protocol import ProbeInfo, ProbeState, ProbeStatus, Progress

NOW = 1_700_000_000.0
"""The clock every synthetic row is read at: renders that say "ago" stay the same."""
GROUP = "10.0.0.1:29500"


def probe_status(
    rank: int | None,
    *,
    step: int = 120,
    stepped_ago: float = 0.5,
    state: ProbeState = ProbeState.ALIVE,
    seen_ago: float = 0.3,
    actor: str = "Worker",
    node: int = 0,
    world_size: int = 4,
    group: str | None = GROUP,
    version: str = "0.1.0",
) -> ProbeStatus:
    """One process's row: rank `rank` (None: a process without one) on node `node`."""
    pid = 1000 + (rank if rank is not None else 900)
    ctx = RankContext(
        rank, rank, world_size, f"node-{node}", f"10.0.0.{node + 1}", f"host-{node}", pid,
        "01000000", f"actor-{pid}", actor, None, "env", group if rank is not None else None,
    )  # fmt: skip
    return ProbeStatus(
        ProbeInfo(f"p{pid}", ctx, version, NOW - 900),
        state,
        NOW - 900,
        NOW - seen_ago,
        Progress(step, NOW - stepped_ago),
        0,
        0,
    )
