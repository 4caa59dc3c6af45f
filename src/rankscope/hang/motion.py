"""Stuck or slow (pure): what moved at a rank between two looks at it.

One rule for the report's verdict (`report.diagnosis`) and the group judge's alerts
(`hang.worker_group_judge`): a rank its group waits for is slow, not stuck, when between two looks
its step moved, its newest collective moved on, its call chain (functions, not lines, and
not the standard library's innermost calls a polling loop makes) changed or it read or wrote
at least `IO_MOTION_BYTES` of storage; past `SLOW_LIMIT_S` of
waiting it is stuck all the same. CPU alone is not motion: a rank spinning in its own code is
stuck. The call chain and the I/O come from the `motion` heartbeat summary (`hang.worker`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rankscope.runtime.protocol import ProbeStatus

__all__ = [
    "IO_MOTION_BYTES",
    "PROGRESS",
    "SLOW_LIMIT_S",
    "Mark",
    "mark_of",
    "moved",
    "what_moved",
]

SLOW_LIMIT_S = 300.0
"""A rank its group has waited for this long is stuck, moving or not (the watchdog's default
`hang_timeout`)."""
IO_MOTION_BYTES = 1 << 20
"""Storage I/O between two looks that counts as motion: a checkpoint writes megabytes, while a
stuck rank's process may still write a log line or rankscope's own step file."""
STEP_MOVED = "its step moved"
CALLS_MOVED = "its collectives moved on"
PROGRESS = frozenset({STEP_MOVED, CALLS_MOVED})
"""The motions that are the training's own progress, not only motion in a rank's own code."""


@dataclass(frozen=True)
class Mark:
    """What one look saw of a rank: its step, its newest collective (group, sequence number)
    and its `motion` summary (`chain:io`, empty when unknown)."""

    step: int
    newest_call: tuple[str, int] | None
    motion: str
    seen: float = 0.0
    """When the hub last heard the rank (0: unknown): two looks at one heartbeat tell nothing."""


def mark_of(p: ProbeStatus) -> Mark:
    snapshot: Any = p.summaries.get("collectives")
    records = getattr(snapshot, "records", None) or ()
    newest = (records[-1].group, records[-1].seq) if records else None
    return Mark(p.progress.step, newest, str(p.summaries.get("motion") or ""), p.last_seen)


def what_moved(before: Mark, after: Mark) -> str:
    """How the rank moved between the two looks, or "" when it did not."""
    if after.step != before.step:
        return STEP_MOVED
    if after.newest_call is not None and after.newest_call != before.newest_call:
        return CALLS_MOVED
    if not before.motion or not after.motion or before.motion == after.motion:
        return ""
    chain_a, _, io_a = before.motion.partition(":")
    chain_b, _, io_b = after.motion.partition(":")
    if chain_a != chain_b:
        return "its call stack changed"
    try:
        grew = int(io_b) - int(io_a)
    except ValueError:
        return ""
    return "it reads or writes storage" if grew >= IO_MOTION_BYTES else ""


def moved(before: Sequence[ProbeStatus], after: Sequence[ProbeStatus]) -> dict[str, str]:
    """Probe id -> how it moved between two registry reads (the ones that did)."""
    then = {p.info.probe_id: mark_of(p) for p in before}
    out = {}
    for p in after:
        old = then.get(p.info.probe_id)
        if old is not None and (how := what_moved(old, mark_of(p))):
            out[p.info.probe_id] = how
    return out
