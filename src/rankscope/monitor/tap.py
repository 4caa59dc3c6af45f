"""The worker side of the straggler's phases: the tracing spans of the training thread.

While a trace window records (`rankscope trace`, `enable_detailed_tracing`), the trace feature
keeps this process's spans in a ring that its CLI drains (every 0.1-0.5 s). On every heartbeat
(the probe thread) `SpanTap.poll` looks at what the ring holds: every span that ended after the
ring's first one is there, so that stretch of time (or, with no drain since the last look,
everything since then) is a window whose phases are complete; it keeps each window's seconds
per phase (a few numbers), never the spans. The `monitor` command turns the windows into seconds
per step (`phases.per_step`: each phase's share of the covered time times the step time), so
the time lost to drains between looks biases nothing. Tracing off: one dictionary lookup. The
trace package is never imported here (it imports the monitor).
"""

from __future__ import annotations

import collections
import itertools
import statistics
import sys
import threading
from collections.abc import Sequence

from rankscope.monitor.model import StepSample
from rankscope.monitor.phases import PhaseTime, PhaseWindow, per_step, phase_window

__all__ = ["SpanTap"]

WINDOWS = 600
"""Windows kept (one per heartbeat: 10 minutes at 1 s); the oldest go first."""


class SpanTap:
    def __init__(self, capacity: int = WINDOWS) -> None:
        self.windows: collections.deque[PhaseWindow] = collections.deque(maxlen=capacity)
        self._seen_ns = 0

    def poll(self) -> None:
        """Add the window since the last poll (probe thread; never raises)."""
        module = sys.modules.get("rankscope.trace.spans")
        ring = module.recording() if module is not None else None
        if ring is None:
            return
        try:
            items = list(ring.spans)  # one C-level copy: the training thread keeps appending
            steps = list(ring.steps)[-1:]
        except Exception:
            return
        if not items or items[-1][2] <= self._seen_ns:
            return
        # drained since the last look: complete only from the ring's first span's end on
        lo = self._seen_ns if items[0][2] <= self._seen_ns else items[0][2]
        hi = items[-1][2]
        ident = steps[-1][2] if steps else threading.main_thread().ident
        spans = []
        for name, start, end, thread, _attrs in reversed(items):  # appended as they end
            if end <= lo:
                break
            if thread == ident:
                spans.append((str(name), int(start), int(end)))
        self._seen_ns = hi
        if hi > lo:
            self.windows.append(phase_window(spans, lo, hi))

    def phases(self, samples: Sequence[StepSample]) -> tuple[PhaseTime, ...]:
        """Seconds per step and phase over the windows within `samples` (empty without spans)."""
        if len(samples) < 2:
            return ()
        since = samples[0].t * 1e9
        windows = [w for w in list(self.windows) if w.lo_ns >= since]
        durations = [b.t - a.t for a, b in itertools.pairwise(samples[-100:])]
        return per_step(windows, statistics.median(durations)) if windows else ()
