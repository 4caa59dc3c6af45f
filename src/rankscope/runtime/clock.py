"""This process's clock against the hub's, estimated from heartbeat round trips (NTP-style).

Each heartbeat reply carries when the hub received the poll and when it answered; with the
probe's own send and receive times that is one NTP sample: `offset = ((t1 - t0) + (t2 - t3)) / 2`
(the hub's clock minus ours) and `delay = (t3 - t0) - (t2 - t1)` (the round trip without the long
poll's wait). The sample with the smallest delay among the recent ones is kept: its offset is off
by at most `delay / 2`, the error stated with it. Pure: no Ray, no I/O.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass

__all__ = ["ClockEstimate", "ClockOffset"]

WINDOW = 64
"""Recent samples the minimum is taken over (a minute at the default heartbeat): clocks drift."""


@dataclass(frozen=True)
class ClockEstimate:
    """The hub's clock minus this process's clock, and how far off that can be."""

    offset_s: float
    """Add it to a local `time.time()` to get the hub's time."""
    error_s: float
    """Half the round trip of the sample used: the offset is within +- this."""
    samples: int


class ClockOffset:
    """Keeps the last `WINDOW` samples; `estimate()` is the one with the smallest delay."""

    def __init__(self, window: int = WINDOW) -> None:
        self._samples: collections.deque[tuple[float, float]] = collections.deque(maxlen=window)
        self._lock = threading.Lock()
        self._count = 0

    def add(self, sent: float, hub_received: float, hub_replied: float, received: float) -> None:
        """One round trip: our send time, the hub's receive and reply times, our receive time."""
        delay = (received - sent) - (hub_replied - hub_received)
        if delay < 0:  # a clock stepped meanwhile: the sample means nothing
            return
        offset = ((hub_received - sent) + (hub_replied - received)) / 2
        with self._lock:
            self._samples.append((delay, offset))
            self._count += 1

    def estimate(self) -> ClockEstimate | None:
        """The minimum-delay sample of the recent ones; None before the first heartbeat."""
        with self._lock:
            if not self._samples:
                return None
            delay, offset = min(self._samples)
            return ClockEstimate(offset_s=offset, error_s=delay / 2, samples=self._count)
