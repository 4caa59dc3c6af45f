"""torch.profiler for a few steps of a traced rank, merged into the same trace.

torch.profiler started from the probe thread records nothing of the training thread ("External
init callback must run in same thread"), so the probe only asks (`request`); the training thread
starts and stops the profiler itself at `rankscope.step()` boundaries, through a step hook that
costs one global lookup while nothing is asked. The next drain, on the probe thread, turns the
profiler's events into spans on tracks of their own (`torch.profiler thread N`, and a track per
device for GPU kernels), on the worker's clock like every other span.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from rankscope.runtime.probe import register_step_hook
from rankscope.trace.model import SpanTuple

__all__ = ["MAX_EVENTS", "cancel", "request", "take_events"]

MAX_EVENTS = 200_000
"""Profiler events kept from one profiled window; the rest are dropped and counted."""
_THREAD_BASE = -1_000
"""Synthetic thread idents for the profiler's tracks (never a real thread's)."""

_wanted: int | None = None
"""Steps to profile, asked by the probe and not yet started."""
_lock = threading.Lock()
_running: dict[str, Any] = {}
_finished: list[tuple[Any, int]] = []
"""(profile, trace start ns) of profiled windows not yet drained."""
_errors: list[str] = []


def request(steps: int) -> None:
    """Profile the next `steps` steps of the thread that calls `rankscope.step()`."""
    global _wanted
    with _lock:
        _wanted = steps if steps > 0 else None


def cancel() -> None:
    """Stop asking; a profiler already running stops at the next step."""
    global _wanted
    with _lock:
        _wanted = None
        if _running:
            _running["left"] = 0


@register_step_hook
def _profile_steps() -> None:
    if _wanted is None and not _running:
        return
    try:
        _advance()
    except Exception as exc:  # never into the training code
        _errors.append(f"torch.profiler: {type(exc).__name__}: {exc}")
        _running.clear()


def _advance() -> None:
    global _wanted
    if _running:
        _running["left"] -= 1
        if _running["left"] <= 0:
            prof, start_ns = _running["prof"], _running["start_ns"]
            _running.clear()
            prof.stop()
            with _lock:
                _finished.append((prof, start_ns))
        return
    with _lock:
        steps, _wanted = _wanted, None
    if not steps:
        return
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        activities.append(ProfilerActivity.CUDA)
    prof = profile(activities=activities)
    prof.start()
    start_ns = _trace_start_ns(prof)
    _running.update(prof=prof, start_ns=start_ns, left=steps)


def _trace_start_ns(prof: Any) -> int:
    try:
        return int(prof.profiler.kineto_results.trace_start_ns())
    except Exception:  # before stop() kineto_results may not exist: take it at stop
        return 0


def take_events() -> tuple[list[SpanTuple], dict[int, str], int, list[str]]:
    """Spans of the profiled windows finished since the last call, their tracks' names, the
    events dropped over `MAX_EVENTS`, and errors."""
    with _lock:
        finished = list(_finished)
        _finished.clear()
    errors = list(_errors)
    _errors.clear()
    spans: list[SpanTuple] = []
    names: dict[int, str] = {}
    dropped = 0
    for prof, start_ns in finished:
        base = start_ns or _trace_start_ns(prof) or time.time_ns()
        for event in prof.events():
            if len(spans) >= MAX_EVENTS:
                dropped += 1
                continue
            device = "CUDA" in str(getattr(event, "device_type", ""))
            if device:
                ident = _THREAD_BASE - 100 - int(getattr(event, "device_index", 0) or 0)
                names[ident] = f"GPU {getattr(event, 'device_index', 0)} (torch.profiler)"
            else:
                ident = _THREAD_BASE - int(getattr(event, "thread", 0) or 0)
                names[ident] = f"torch.profiler thread {getattr(event, 'thread', 0)}"
            start = base + int(event.time_range.start * 1000)
            end = base + int(event.time_range.end * 1000)
            spans.append((str(event.name), start, max(start, end), ident, None))
    return spans, names, dropped, errors
