"""Spans on the worker: `rankscope.span(name, **attrs)` and the bounded ring they go to.

When tracing is off, the module global `_ring` is None and a span costs that one lookup on
enter and on exit. When it is on, a span's exit appends one tuple to a bounded deque (the ring:
the oldest are dropped and counted); the probe drains it from its own thread, so the training
thread never waits. Step markers come from `rankscope.step()` through a step hook.

At level `full` spans are recorded all the time, into a ring of the level's own
(FULL_LEVEL_CAPACITY, the newest kept): a `rankscope trace` window then starts with the spans
from before it, and the monitor sees a straggler's phases without a window. Below `full` that
ring stops; a window's own ring records only while the window lasts.
"""

from __future__ import annotations

import collections
import functools
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from rankscope import level
from rankscope.runtime.probe import progress, register_step_hook
from rankscope.trace.model import SpanTuple, StepTuple

__all__ = [
    "SpanRing",
    "follow_level",
    "full_level_ring",
    "record_span",
    "recording",
    "span",
    "start_recording",
    "stop_recording",
]

F = TypeVar("F", bound=Callable[..., Any])
MAX_STEPS = 100_000
"""Step markers a ring keeps between drains."""
FULL_LEVEL_CAPACITY = 100_000
"""Spans the level `full` ring keeps (about 10 MB at most)."""
_time_ns = time.time_ns
_ident = threading.get_ident


class SpanRing:
    """One process's recorded spans and step markers, bounded; drained by the probe."""

    def __init__(self, capacity: int, steps: int | None = None) -> None:
        self.spans: collections.deque[SpanTuple] = collections.deque(maxlen=capacity)
        self.steps: collections.deque[StepTuple] = collections.deque(maxlen=MAX_STEPS)
        self.appended = 0
        """Spans recorded since the start (an increment under the GIL: near exact)."""
        self.taken = 0
        self.steps_left = steps
        """Steps until recording stops by itself (None: no limit)."""

    def take(self) -> tuple[list[SpanTuple], list[StepTuple], int]:
        """Everything recorded since the last take, and the spans dropped so far."""
        spans = _drain(self.spans)
        steps = _drain(self.steps)
        self.taken += len(spans)
        dropped = max(0, self.appended - self.taken - len(self.spans))
        return spans, steps, dropped


def _drain(queue: collections.deque[Any]) -> list[Any]:
    """Pop what is there now (thread-safe against appends from other threads)."""
    out = []
    pop = queue.popleft
    for _ in range(len(queue)):
        try:
            out.append(pop())
        except IndexError:
            break
    return out


_ring: SpanRing | None = None
"""None: tracing is off (the one lookup a span pays then)."""
_full_ring: SpanRing | None = None
"""The level `full` ring while the level is `full`; records whenever no window's ring does."""
_lock = threading.Lock()


def start_recording(capacity: int, steps: int | None = None) -> SpanRing:
    """Turn span recording on in this process (a fresh ring)."""
    global _ring
    with _lock:
        _ring = SpanRing(capacity, steps)
        return _ring


def stop_recording() -> SpanRing | None:
    """Turn it off (at level `full`, back to the level's ring); returns the ring that stopped
    (what it still holds is for the last drain)."""
    global _ring
    with _lock:
        ring, _ring = _ring, _full_ring
        return ring


def full_level_ring() -> SpanRing | None:
    """The level `full` ring, while it records (None below `full` or during a window)."""
    ring = _full_ring
    return ring if ring is not None and _ring is ring else None


@level.on_change
def follow_level(value: str) -> None:
    """At `full`, record into the level's ring whenever no window records; below, stop it."""
    global _ring, _full_ring
    with _lock:
        if value == "full":
            if _full_ring is None:
                _full_ring = SpanRing(FULL_LEVEL_CAPACITY)
            if _ring is None:
                _ring = _full_ring
        elif _full_ring is not None:
            if _ring is _full_ring:
                _ring = None
            _full_ring = None


follow_level(level.current().level)  # RANKSCOPE_LEVEL=full at start


def recording() -> SpanRing | None:
    """The live ring, or None when tracing is off."""
    return _ring


def record_span(name: str, start_ns: int, attrs: dict[str, Any] | None = None) -> None:
    """Add a span that started at `start_ns` and ends now (no-op when tracing is off)."""
    ring = _ring
    if ring is not None:
        ring.spans.append((name, start_ns, _time_ns(), _ident(), attrs))
        ring.appended += 1


class span:  # a class used like a function: `with rankscope.span(...)`
    """A named span on this rank's track: a context manager, or a decorator.

    Example: `with rankscope.span("forward", micro_batch=3): loss = model(x)`.
    Nests; costs one global lookup on enter and exit when tracing is off.
    """

    __slots__ = ("_start", "attrs", "name")

    def __init__(self, name: str, /, **attrs: Any) -> None:
        self.name = name
        self.attrs = attrs or None  # decided once here, not on every exit

    def __enter__(self) -> span:
        self._start = _time_ns() if _ring is not None else 0
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        ring = _ring
        if ring is not None and self._start:
            if exc_type is None:
                ring.spans.append((self.name, self._start, _time_ns(), _ident(), self.attrs))
            else:
                attrs = {**(self.attrs or {}), "error": exc_type.__name__}
                ring.spans.append((self.name, self._start, _time_ns(), _ident(), attrs))
            ring.appended += 1

    def __call__(self, fn: F) -> F:
        """`@rankscope.span("load")`: a span around every call (sync or async)."""
        name, attrs = self.name, self.attrs
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def traced_async(*args: Any, **kwargs: Any) -> Any:
                if _ring is None:
                    return await fn(*args, **kwargs)
                start = _time_ns()
                try:
                    return await fn(*args, **kwargs)
                finally:
                    record_span(name, start, attrs)

            return traced_async  # type: ignore[return-value]

        @functools.wraps(fn)
        def traced(*args: Any, **kwargs: Any) -> Any:
            if _ring is None:
                return fn(*args, **kwargs)
            start = _time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                record_span(name, start, attrs)

        return traced  # type: ignore[return-value]


@register_step_hook
def _mark_step() -> None:
    """A step marker per `rankscope.step()` while tracing; stops after the steps asked for."""
    ring = _ring
    if ring is None:
        return
    ring.steps.append((_time_ns(), progress.step, _ident()))
    if ring.steps_left is not None:
        ring.steps_left -= 1
        if ring.steps_left <= 0:
            stop_recording()
