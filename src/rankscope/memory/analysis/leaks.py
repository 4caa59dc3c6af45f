"""The leak test: a Theil-Sen slope and a monotonicity criterion over a series of snapshots.

The slope is the median of pairwise slopes (robust to spikes); the trend must also be monotone
(Kendall's tau, or minima that keep rising), so a sawtooth back to its baseline is never a leak.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace

from rankscope.memory.model import (
    LEAK_METRICS,
    METRICS,
    MIB,
    AllocationSite,
    LeakFinding,
    MemorySnapshot,
)
from rankscope.units import human_bytes, human_seconds

LATE_START_RATIO = 1.5
"""The recent half's slope must be this much steeper to report a leak as starting late."""


MAX_ONE_STEP_SHARE = 0.6
"""Troughs that climb mostly in one step rose once: not a leak (`_climbs_in_many_steps`)."""

MAX_TREND_POINTS = 400
"""Series are thinned to this many points before the O(n^2) pairwise slopes."""


@dataclass(frozen=True)
class LeakThresholds:
    """The leak test's knobs.

    Example: `LeakThresholds(warmup=10, min_growth_bytes=64 * 2**20)`.
    """

    warmup: int = 5
    """Snapshots skipped at the start (allocator caches and lazy initialisation grow there)."""
    min_points: int = 8
    """Fewer snapshots after the warm-up: no verdict."""
    min_tau: float = 0.6
    """Kendall's tau (pairs going up minus pairs going down, over all pairs) to call a trend."""
    min_growth_bytes: int = 4 * MIB
    """Growth over the window below this is noise."""
    min_growth_fraction: float = 0.005
    """... and so is growth below this fraction of the metric's level."""

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.min_points < 3:
            raise ValueError(
                f"warmup ({self.warmup}) must be >= 0 and min_points ({self.min_points}) >= 3"
            )
        if not 0.0 < self.min_tau <= 1.0:
            raise ValueError(f"min_tau must be in (0, 1], got {self.min_tau}")


@dataclass(frozen=True)
class LeakReport:
    """`MemoryProfiler.leak_report()`: every metric's leak test and the suspects."""

    label: str
    snapshots: int
    findings: tuple[LeakFinding, ...]
    suspects: tuple[AllocationSite, ...] = ()
    """Fastest-growing allocation sites since the warm-up (tracemalloc), largest first."""

    @property
    def leaks(self) -> tuple[LeakFinding, ...]:
        return tuple(f for f in self.findings if f.leak)

    @property
    def leak_detected(self) -> bool:
        return bool(self.leaks)

    def summary(self) -> str:
        if not self.leaks:
            tested = ", ".join(f"{f.metric}: {f.reason}" for f in self.findings) or "no data"
            return f"{self.label}: no leak ({tested})"
        parts = [describe_leak(f) for f in self.leaks]
        if self.suspects:
            top = self.suspects[0]
            parts.append(f"top suspect {top.location} (+{human_bytes(top.size_diff)})")
        return f"{self.label}: " + "; ".join(parts)


def theil_sen(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(slope, intercept): the median of all pairwise slopes, robust to outliers."""
    import numpy as np

    x = np.asarray(xs, dtype=np.float64)
    y = np.asarray(ys, dtype=np.float64)
    i, j = np.triu_indices(len(x), k=1)
    dx = x[j] - x[i]
    keep = dx != 0
    if not keep.any():
        return 0.0, float(np.median(y)) if len(y) else 0.0
    slope = float(np.median((y[j] - y[i])[keep] / dx[keep]))
    return slope, float(np.median(y - slope * x))


def kendall_tau(xs: Sequence[float], ys: Sequence[float]) -> float:
    """(concordant - discordant) / pairs with distinct x: 1.0 for a series that only grows."""
    import numpy as np

    x = np.asarray(xs, dtype=np.float64)
    y = np.asarray(ys, dtype=np.float64)
    i, j = np.triu_indices(len(x), k=1)
    sx = np.sign(x[j] - x[i])
    pairs = int(np.count_nonzero(sx))
    if pairs == 0:
        return 0.0
    return float(np.sum(sx * np.sign(y[j] - y[i])) / pairs)


def thin(items: Sequence[MemorySnapshot], limit: int) -> list[MemorySnapshot]:
    """At most `limit` items evenly spread, always keeping the first and the last."""
    import numpy as np

    n = len(items)
    if n <= limit:
        return list(items)
    idx = np.unique(np.linspace(0, n - 1, limit).round().astype(int))
    return [items[k] for k in idx]


def detect_leak(
    metric: str,
    snapshots: Sequence[MemorySnapshot],
    thresholds: LeakThresholds | None = None,
) -> LeakFinding:
    """Is `metric` leaking in these snapshots (oldest first)? See `LeakThresholds`."""
    th = thresholds or LeakThresholds()
    usable = [s for s in snapshots[th.warmup :] if metric in s.metrics()]
    if len(usable) < th.min_points:
        return LeakFinding(
            metric, False, f"{len(usable)} snapshots after warm-up, need {th.min_points}", 0
        )
    usable = thin(usable, MAX_TREND_POINTS)
    windows = [usable]
    half = usable[len(usable) // 2 :]
    if len(half) >= th.min_points:
        windows.append(half)  # a leak that started late shows a steeper slope here
    results = [_test_window(metric, w, th) for w in windows]
    chosen = 0
    if len(results) == 2 and results[1].leak:
        whole, recent = results
        if not whole.leak or recent.per_step > LATE_START_RATIO * whole.per_step:
            chosen = 1
    found = results[chosen]
    if not found.leak:
        return found
    return replace(found, since_step=_onset(metric, usable, windows[chosen], found))


def _onset(
    metric: str, usable: Sequence[MemorySnapshot], window: Sequence[MemorySnapshot], f: LeakFinding
) -> float | None:
    """Where the leak began: the first snapshot after the warm-up when those already sit on the
    leak's line, else where the line, followed back, meets their level (a leak that began late).
    """
    import numpy as np

    if f.per_step <= 0 or any(s.step is None for s in usable):
        return f.since_step
    xs = np.array([float(s.step or 0) for s in window])
    ys = np.array([s.metrics()[metric] for s in window])
    slope, intercept = f.per_step, theil_sen(xs.tolist(), ys.tolist())[1]
    noise = float(np.median(np.abs(ys - (slope * xs + intercept))))
    head = usable[: max(3, len(usable) // 10)]
    hx = np.array([float(s.step or 0) for s in head])
    hy = np.array([s.metrics()[metric] for s in head])
    above = float(np.median(hy - (slope * hx + intercept)))
    first = float(usable[0].step or 0)
    if above <= max(2 * slope, 3 * noise):
        return first
    onset = (float(np.median(hy)) - intercept) / slope
    return float(min(max(onset, first), xs[-1]))


def _test_window(metric: str, window: Sequence[MemorySnapshot], th: LeakThresholds) -> LeakFinding:
    import numpy as np

    xs = [float(s.step) for s in window if s.step is not None]
    if len(xs) < len(window) or len(set(xs)) < 3:  # no steps, or steps that never moved
        xs = [float(k) for k in range(len(window))]
    ts = [s.time for s in window]
    ys = [s.metrics()[metric] for s in window]
    slope, _ = theil_sen(xs, ys)
    per_second, _ = theil_sen(ts, ys)
    tau = kendall_tau(xs, ys)
    level = float(np.median(ys))
    growth = slope * (max(xs) - min(xs))
    floor_rise, floors_rising, expected_rise = _floors(xs, ys, slope)
    capacity = _capacity_left(metric, window[-1])
    to_full = capacity / per_second if capacity is not None and per_second > 0 else None
    base = LeakFinding(
        metric,
        False,
        "",
        len(window),
        per_step=slope,
        per_second=per_second,
        tau=tau,
        floor_rise=floor_rise,
        since_step=min(xs),
        level=level,
        capacity_left=capacity,
    )
    floor_needed = max(th.min_growth_bytes, th.min_growth_fraction * level)
    if slope <= 0 or growth < floor_needed:
        grew = human_bytes(max(growth, 0.0))
        return replace(base, reason=f"grew {grew} over the window (< {human_bytes(floor_needed)})")
    rising = floors_rising and floor_rise >= 0.5 * expected_rise
    if not _climbs_in_many_steps(ys):
        return replace(base, reason=f"its low points rose at most once, then held (tau {tau:.2f})")
    if tau < th.min_tau and not rising:
        floor = human_bytes(max(floor_rise, 0.0))
        return replace(base, reason=f"returns to its baseline (tau {tau:.2f}, floor +{floor})")
    reason = f"grows {human_bytes(slope)}/step (tau {tau:.2f}, floor +{human_bytes(floor_rise)})"
    return replace(base, leak=True, reason=reason, seconds_to_full=to_full)


def _floors(xs: Sequence[float], ys: Sequence[float], slope: float) -> tuple[float, bool, float]:
    """Lowest value of each quarter: (last - first, never falling, what the slope predicts)."""
    import numpy as np

    n = len(ys)
    cuts = [round(k * n / 4) for k in range(5)]
    quarters = [(xs[a:b], ys[a:b]) for a, b in itertools.pairwise(cuts) if b > a]
    mins = [min(q[1]) for q in quarters]
    centers = [float(np.mean(q[0])) for q in quarters]
    expected = slope * (centers[-1] - centers[0])
    tolerance = 0.1 * abs(expected)
    rising = all(b >= a - tolerance for a, b in itertools.pairwise(mins))
    return mins[-1] - mins[0], rising, expected


def _climbs_in_many_steps(ys: Sequence[float]) -> bool:
    """A leak keeps growing; a one-off rise (a lazy import, a cache filled once) is one step up.

    The troughs (each the lowest value within two points either side) of a leaking series climb
    trough after trough; after a one-off rise they climb once, or not at all when it came before
    the first trough, and hold. Fewer than three troughs (a smooth climb, no sawtooth) cannot
    tell, and pass.
    """
    troughs = [ys[i] for i in range(2, len(ys) - 2) if ys[i] == min(ys[i - 2 : i + 3])]
    if len(troughs) < 3:
        return True
    climb = troughs[-1] - troughs[0]
    if climb <= 0:
        return False  # the troughs hold their level: what rose came before them
    steps = [b - a for a, b in itertools.pairwise(troughs)]
    return max(steps) <= MAX_ONE_STEP_SHARE * climb


def _capacity_left(metric: str, snap: MemorySnapshot) -> float | None:
    kind = METRICS[metric].capacity if metric in METRICS else "node"
    if kind == "device":
        if snap.cuda is None:
            return None
        extra = snap.cuda.cached_free if metric == "cuda_allocated" else 0
        return float(snap.cuda.device_free + extra)
    return float(snap.node_available)


def detect_leaks(
    snapshots: Sequence[MemorySnapshot],
    thresholds: LeakThresholds | None = None,
    metrics: Sequence[str] = LEAK_METRICS,
) -> tuple[LeakFinding, ...]:
    """The leak test on every metric these snapshots carry."""
    present = set(snapshots[-1].metrics()) if snapshots else set()
    return tuple(detect_leak(m, snapshots, thresholds) for m in metrics if m in present)


def describe_leak(f: LeakFinding) -> str:
    text = f"{f.title} leaks {human_bytes(f.per_step)}/step"
    if f.per_second > 0:
        text += f" ({human_bytes(f.per_second)}/s)"
    if f.since_step is not None:
        text += f" since step {f.since_step:g}"
    if f.seconds_to_full is not None and f.capacity_left is not None:
        text += f"; {human_bytes(f.capacity_left)} left: full in {human_seconds(f.seconds_to_full)}"
    return text
