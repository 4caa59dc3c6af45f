"""The worker side of the straggler's phases: the tracing spans of the training thread.

While a trace window records (`rankscope trace`, `enable_detailed_tracing`), the trace feature
keeps this process's spans in a ring that its CLI drains (every 0.1-0.5 s). On every heartbeat
(the probe thread) `SpanTap.poll` looks at what the ring holds: every span that ended after the
ring's first one is there, so that stretch of time (or, with no drain since the last look,
everything since then) is a window whose phases are complete; it keeps each window's seconds
per phase (a few numbers), never the spans. The `monitor` command turns the windows into seconds
per step (`phases.per_step`: each phase's share of the covered time times the step time), so
the time lost to drains between looks biases nothing. The trace package is never imported here
(it imports the monitor).

With no trace window, the tap samples: at most once a minute, while the rank steps, it records
spans itself for `sample_steps` steps (the trace feature's own ring, which stops by itself after
those steps; at most `SAMPLE_MAX_S`), so a straggler's phase is known without anyone tracing.
Spans cost ~1 us while recorded, so a sample costs a few microseconds a step for 20 steps a
minute. A window started meanwhile (`rankscope trace`) simply replaces the sample's ring.
"""

from __future__ import annotations

import collections
import itertools
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from rankscope.monitor.model import StepSample
from rankscope.monitor.phases import PhaseTime, PhaseWindow, per_step, phase_window

__all__ = ["SpanTap"]

WINDOWS = 600
"""Windows kept (one per heartbeat: 10 minutes at 1 s); the oldest go first."""
SAMPLE_EVERY_S = 60.0
SAMPLE_STEPS = 20
SAMPLE_MAX_S = 30.0
"""A sample that outlives this (the rank stopped stepping) is stopped by the tap."""
SAMPLE_CAPACITY = 4096


class SpanTap:
    def __init__(
        self,
        capacity: int = WINDOWS,
        sample_every_s: float = SAMPLE_EVERY_S,
        sample_steps: int = SAMPLE_STEPS,
    ) -> None:
        self.windows: collections.deque[PhaseWindow] = collections.deque(maxlen=capacity)
        self._seen_ns = 0
        self.sample_every_s, self.sample_steps = sample_every_s, sample_steps
        self._sample: Any = None
        """The ring of the sample this tap started, while it may still hold unread spans."""
        self._sample_at = -float("inf")

    def poll(self, stepping: bool = False) -> None:
        """Add the window since the last poll; with no window recording and `stepping` (the rank
        marks steps), start a sample now and then (probe thread; never raises)."""
        module = sys.modules.get("rankscope.trace.worker_spans")
        if module is None:
            return
        try:
            ring = module.recording()
            now = time.monotonic()
            if ring is None:
                ended, self._sample = self._sample, None
                if ended is not None:  # the sample stopped itself: its steps were done
                    self._read(ended)
                elif stepping and 0 < self.sample_every_s <= now - self._sample_at:
                    self._sample_at = now
                    self._sample = module.start_recording(SAMPLE_CAPACITY, self.sample_steps)
                return
            if ring is not self._sample:
                self._sample = None  # a trace window replaced the sample (or there was none)
            elif now - self._sample_at > SAMPLE_MAX_S:
                module.stop_recording()  # as the trace handler stops its own ring
                self._sample = None
        except Exception:
            return
        self._read(ring)

    def _read(self, ring: Any) -> None:
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
