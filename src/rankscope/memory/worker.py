"""The probe's `memory` command: this process's memory now, and its profiler's verdicts.

Runs on the probe's worker thread (`off_thread`), within the probe's handler budget. It never
imports torch and never creates a CUDA context: CUDA is read only in a process that already
initialised it. Its costly part, the tracemalloc comparison behind the suspects, holds the GIL
while it runs, so it is redone at most every `Config.suspects_interval` seconds (`rankscope
memory --watch` asks every 2 s); the replies in between carry the last suspects.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from rankscope.config import Config
from rankscope.memory import analysis
from rankscope.memory import worker_snapshot as snap
from rankscope.memory.model import MemorySnapshot, RankMemoryReply
from rankscope.memory.worker_profiler import active_profiler
from rankscope.runtime.api import current_probe
from rankscope.runtime.probe import progress, register_handler, register_tick

HISTORY_LIMIT = 400
"""Profiler snapshots sent back at most (thinned evenly), so replies stay small."""
TREND_POINTS = 600
"""Heartbeat snapshots of this process's host memory kept without a profiler: ten minutes at
one heartbeat a second, so a live report can test a leak with no code change."""
_trend: deque[MemorySnapshot] = deque(maxlen=TREND_POINTS)


@register_tick
def _sample_trend() -> None:
    """Each heartbeat: RSS and the node's memory (a few microseconds, no CUDA, no USS)."""
    _trend.append(snap.take_snapshot(step=progress.step, tag="heartbeat", uss=False))


def current_memory(
    *, history: bool = False, suspects_max_age_s: float | None = None, points: int = HISTORY_LIMIT
) -> RankMemoryReply:
    """This process's memory as the `memory` command reports it; the suspects are reused while
    younger than `suspects_max_age_s` (default: the probe's `suspects_interval`; 0: never)."""
    profiler = active_profiler()
    device = profiler.device if profiler is not None else _initialised_cuda_device()
    now = snap.take_snapshot(step=progress.step, tag="probe", cuda_device=device, uss=True)
    if profiler is None:
        trend = tuple(analysis.thin(list(_trend), points)) if history else ()
        return RankMemoryReply(now, history=trend)
    if suspects_max_age_s is None:
        suspects_max_age_s = suspects_interval()
    report = (
        profiler.leak_report(suspects_max_age_s=suspects_max_age_s)
        if profiler.leak_detection
        else None
    )
    return RankMemoryReply(
        now,
        has_profiler=True,
        history=tuple(analysis.thin(profiler.snapshots, points)) if history else (),
        leaks=report.findings if report is not None else (),
        suspects=report.suspects if report is not None else (),
        thinned=profiler.thinned,
    )


def suspects_interval() -> float:
    """The running probe's `suspects_interval`, else the environment's (RANKSCOPE_*)."""
    probe = current_probe()
    return (probe.config if probe is not None else Config.from_env()).suspects_interval


@register_handler("memory", off_thread=True)
def _memory_command(args: dict[str, Any]) -> RankMemoryReply:
    args = args or {}
    points = min(HISTORY_LIMIT, int(args.get("points", HISTORY_LIMIT)))
    return current_memory(history=bool(args.get("history", False)), points=points)


def _initialised_cuda_device() -> int | None:
    torch = snap.torch_if_loaded()
    if torch is None:
        return None
    try:
        if not torch.cuda.is_initialized():
            return None
    except Exception:
        return None
    return snap.cuda_device_index(None)
