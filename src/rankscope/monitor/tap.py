"""The worker side of the straggler's phases: the tracing spans of the training thread.

While a trace window records (`rankscope trace`, `enable_detailed_tracing`), the trace feature
keeps this process's spans in a ring that its CLI drains. On every heartbeat (the probe thread)
`SpanTap.poll` copies the spans that ended since its last look, of the thread that calls
`rankscope.step()`, into a bounded deque of its own; the `monitor` command turns them into
seconds per step and phase (`phases.phase_times`). Tracing off: one dictionary lookup. The trace
package is never imported here (it imports the monitor).
"""

from __future__ import annotations

import collections
import sys
import threading
from collections.abc import Sequence

from rankscope.monitor.model import StepSample
from rankscope.monitor.phases import PhaseTime, phase_times

__all__ = ["SpanTap"]

CAPACITY = 8192
"""Spans kept (about 1 MB); the oldest go first."""


class SpanTap:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self.spans: collections.deque[tuple[str, int, int]] = collections.deque(maxlen=capacity)
        self._seen_ns = 0

    def poll(self) -> None:
        """Take the spans that ended since the last poll (probe thread; never raises)."""
        module = sys.modules.get("rankscope.trace.spans")
        ring = module.recording() if module is not None else None
        if ring is None:
            return
        try:
            items = list(ring.spans)  # one C-level copy: the training thread keeps appending
            steps = list(ring.steps)[-1:]
        except Exception:
            return
        if not items:
            return
        ident = steps[-1][2] if steps else threading.main_thread().ident
        new = []
        for name, start, end, thread, _attrs in reversed(items):  # appended as they end
            if end <= self._seen_ns:
                break
            if thread == ident:
                new.append((str(name), int(start), int(end)))
        self._seen_ns = max(self._seen_ns, items[-1][2])
        self.spans.extend(reversed(new))

    def phases(self, samples: Sequence[StepSample]) -> tuple[PhaseTime, ...]:
        """Seconds per step and phase over the steps the spans cover (empty without spans)."""
        spans = list(self.spans)
        if not spans or not samples:
            return ()
        lo, hi = min(s[1] for s in spans) / 1e9, max(s[2] for s in spans) / 1e9
        times = [s.t for s in samples if lo <= s.t <= hi]
        steps = len(times) + 1  # N steps inside the window leave N - 1 markers there
        return phase_times(spans, steps)
