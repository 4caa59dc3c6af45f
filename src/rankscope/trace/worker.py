"""The probe's `trace` command: start a recording window, drain it, stop it.

`{"action": "start", "session": ID, "options": TraceOptions}` turns spans on; `drain` returns
what was recorded since the last drain (spans, step markers, the collective recorder's new
calls, a memory sample, the clock estimate); `stop` turns spans off and returns the rest. A
window ends by itself after `options.ttl_s` (checked with every heartbeat), so a CLI that died
never leaves a job tracing. Runs on the probe thread; the training thread never waits for it.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from typing import Any

from rankscope import level
from rankscope.hang.model import CollectiveRecord
from rankscope.hang.worker_recorder import collective_recorder
from rankscope.runtime.api import current_probe
from rankscope.runtime.clock import ClockEstimate
from rankscope.runtime.probe import register_handler, register_summary
from rankscope.trace import worker_profiler, worker_spans
from rankscope.trace.model import CounterTuple, SpanTuple, TraceChunk, TraceOptions
from rankscope.trace.worker_decorator import arg_repr

__all__ = ["Session", "clock_estimate", "trace_command"]

IN_FLIGHT_SLACK = 32
"""Collective records looked at again on the next drain: calls still running at this one."""


@dataclasses.dataclass
class Session:
    """This process's recording window."""

    session: str
    options: TraceOptions
    ring: worker_spans.SpanRing
    started_ns: int
    expires: float
    seen_total: int
    """The collective recorder's call count at the previous drain."""
    stopped_ns: int | None = None
    new_collectives: int = 0
    missed_collectives: int = 0
    dropped_profiled: int = 0


_session: Session | None = None
_lock = threading.Lock()
_process: Any = None


@register_handler("trace")
def trace_command(args: dict[str, Any]) -> TraceChunk:
    """Start, drain or stop this process's recording window (see the module's docstring)."""
    action, session_id = args.get("action"), str(args.get("session", ""))
    with _lock:
        if action == "start":
            return _start(session_id, args.get("options") or TraceOptions())
        session = _session
        if session is None or session.session != session_id:
            raise RuntimeError(f"no trace session {session_id} here (it ended or never started)")
        if action == "stop":
            _stop(session)
        elif action != "drain":
            raise ValueError(f"unknown trace action {action!r}")
        return _chunk(session)


def _start(session_id: str, options: TraceOptions) -> TraceChunk:
    global _session
    if not level.RECORDING:
        raise RuntimeError("rankscope's level is off here: `rankscope level light` first")
    current = _session
    busy = current is not None and current.stopped_ns is None and current.session != session_id
    if busy and current is not None and time.time() < current.expires:
        raise RuntimeError(f"already tracing for session {current.session}; try again later")
    ring = worker_spans.full_level_ring()  # at level full: the spans from before the window too
    if ring is None or options.steps is not None:
        ring = worker_spans.start_recording(options.capacity, options.steps)
    if options.torch_profiler_steps > 0:
        worker_profiler.request(options.torch_profiler_steps)
    session = Session(
        session=session_id,
        options=options,
        ring=ring,
        started_ns=time.time_ns(),
        expires=time.time() + options.ttl_s,
        seen_total=collective_recorder().total,
    )
    _session = session
    return _chunk(session)


def _stop(session: Session) -> None:
    worker_profiler.cancel()
    if worker_spans.recording() is session.ring:
        worker_spans.stop_recording()
    if session.stopped_ns is None:
        session.stopped_ns = time.time_ns()


def _chunk(session: Session) -> TraceChunk:
    taken, steps, dropped = session.ring.take()
    profiled, profiled_threads, profiled_dropped, errors = worker_profiler.take_events()
    taken.extend(profiled)
    session.dropped_profiled += profiled_dropped
    if session.stopped_ns is None and worker_spans.recording() is not session.ring:
        session.stopped_ns = time.time_ns()  # stopped by itself (its steps were done)
    idents = {s[3] for s in taken} | {s[2] for s in steps}
    names = {t.ident: t.name for t in threading.enumerate() if t.ident in idents}
    names.update(profiled_threads)
    return TraceChunk(
        session=session.session,
        spans=tuple(s if s[4] is None else _plain_attrs(s) for s in taken),
        steps=tuple(steps),
        collectives=_new_collectives(session) if session.options.collectives else (),
        counters=(_memory_sample(),) if session.options.memory_counters else (),
        threads=names,
        main_thread=threading.main_thread().ident or 0,
        dropped_spans=dropped + session.dropped_profiled,
        clock=clock_estimate(),
        started_ns=session.started_ns,
        stopped_ns=session.stopped_ns,
        new_collectives=session.new_collectives,
        missed_collectives=session.missed_collectives,
        errors=tuple(errors),
    )


_PLAIN = (str, int, float, bool, type(None))


def _plain_attrs(span: SpanTuple) -> SpanTuple:
    """Attributes as JSON-ready values: a tensor (or anything else) as its bounded repr, so a
    drain never ships data, nor fails to pickle."""
    attrs = span[4] or {}
    if all(isinstance(v, _PLAIN) for v in attrs.values()):
        return span
    plain = {k: v if isinstance(v, _PLAIN) else _repr(v) for k, v in attrs.items()}
    return (span[0], span[1], span[2], span[3], plain)


def _repr(value: Any) -> Any:
    if isinstance(value, dict) and all(isinstance(v, _PLAIN) for v in value.values()):
        return value  # debug_decorator's captured arguments: already bounded strings
    return arg_repr(value)


def _new_collectives(session: Session) -> tuple[CollectiveRecord, ...]:
    """The recorder's calls since the previous drain, and those still running then (the CLI
    keeps the latest version of each)."""
    recorder = collective_recorder()
    total = recorder.total
    new = total - session.seen_total
    session.seen_total = total
    session.new_collectives = new
    session.missed_collectives += max(0, new - recorder.capacity)
    if new <= 0 and total == 0:
        return ()
    snapshot = recorder.snapshot(last=min(recorder.capacity, max(0, new) + IN_FLIGHT_SLACK))
    since = session.started_ns / 1e9
    return tuple(r for r in snapshot.records if (r.end or time.time()) >= since)


def _memory_sample() -> CounterTuple:
    global _process
    import psutil

    if _process is None:
        _process = psutil.Process()
    rss = int(_process.memory_info().rss)
    allocated = peak = None
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                allocated = int(torch.cuda.memory_allocated())
                peak = int(torch.cuda.max_memory_allocated())
        except Exception:  # a broken CUDA context: host memory only
            allocated = peak = None
    return (time.time_ns(), rss, allocated, peak)


def clock_estimate() -> ClockEstimate | None:
    """This process's clock offset to the hub, as its probe estimates it (None: no probe)."""
    probe = current_probe()
    return None if probe is None else probe.clock.estimate()


@level.on_change
def _level_changed(value: str) -> None:
    """Level `off` stops a recording window at once (the CLI's next drain gets the rest)."""
    session = _session
    if value == "off" and session is not None and session.stopped_ns is None:
        with _lock:
            _stop(session)


@register_summary("clock")
def _clock_summary() -> dict[str, float] | None:
    """The clock offset with every heartbeat (the doctor's skew check reads it at the hub);
    also ends a recording window whose time is up."""
    session = _session
    if session is not None and session.stopped_ns is None and time.time() > session.expires:
        with _lock:
            _stop(session)
    estimate = clock_estimate()
    if estimate is None:
        return None
    return {"offset_s": estimate.offset_s, "error_s": estimate.error_s}
