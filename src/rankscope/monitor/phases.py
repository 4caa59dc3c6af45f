"""Which phase of its step makes a straggler slow, from the tracing spans: pure, no Ray, no I/O.

Spans are the user's (`rankscope.span("load_batch")`, `debug_decorator`); a span's name says its
phase (`phase_of`: data loading, forward, backward, optimizer, else the name itself). Per rank,
`phase_window` adds up each phase's time in a stretch of wall time whose spans were all seen
(overlapping spans of one phase count once), `per_step` turns windows into seconds per step,
and `slow_phase` compares the straggler's phases with the median rank of its group:

    rank 3 is 2.1x slower: data loading 1.80 s vs median 200 ms a step (compute 300 ms vs 300 ms)
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "COMPUTE",
    "PhaseTime",
    "PhaseWindow",
    "SlowPhase",
    "per_step",
    "phase_of",
    "phase_window",
    "slow_phase",
]

DATA = "data loading"
COMPUTE = ("forward", "backward", "optimizer")
"""The phases that make up compute (`SlowPhase.compute_s`)."""
_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (DATA, ("data", "load", "batch", "fetch", "input", "prefetch", "collate", "read")),
    ("backward", ("backward", "bwd", "grad")),
    ("forward", ("forward", "fwd", "rollout", "generate")),
    ("optimizer", ("optim", "update", "adam", "sgd")),
)
MIN_EXCESS_S = 0.001
"""A phase longer than the median rank's by less than this (a step) names nothing."""


def phase_of(name: str) -> str:
    """`"load_batch"` -> `"data loading"`; `"optimizer.step"` -> `"optimizer"`; else `name`."""
    low = name.lower()
    for phase, words in _WORDS:
        if any(w in low for w in words):
            return phase
    return name


@dataclass(frozen=True)
class PhaseTime:
    """One phase of one rank: seconds per step, over the spans seen."""

    phase: str
    seconds: float
    names: tuple[str, ...] = ()
    """The span names it was made of (a few)."""


def _union_ns(intervals: Iterable[tuple[int, int]]) -> int:
    total, end = 0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


@dataclass(frozen=True)
class PhaseWindow:
    """A stretch of wall time in which every span that ended was seen, and its phases' time."""

    lo_ns: int
    hi_ns: int
    seconds: tuple[tuple[str, float], ...]
    """(phase, seconds of it inside the window), overlapping spans of a phase counted once."""
    names: tuple[tuple[str, tuple[str, ...]], ...] = ()


def phase_window(spans: Iterable[tuple[str, int, int]], lo_ns: int, hi_ns: int) -> PhaseWindow:
    """The phases of `spans` (name, start_ns, end_ns), each clipped to [lo_ns, hi_ns]."""
    by_phase: dict[str, list[tuple[int, int]]] = {}
    names: dict[str, set[str]] = {}
    for name, start, end in spans:
        start, end = max(start, lo_ns), min(end, hi_ns)
        if end <= start:
            continue
        phase = phase_of(name)
        by_phase.setdefault(phase, []).append((start, end))
        if len(names.setdefault(phase, set())) < 3:
            names[phase].add(name)
    return PhaseWindow(
        lo_ns,
        hi_ns,
        tuple((p, _union_ns(iv) / 1e9) for p, iv in by_phase.items()),
        tuple((p, tuple(sorted(n))) for p, n in names.items()),
    )


def per_step(windows: Sequence[PhaseWindow], step_s: float) -> tuple[PhaseTime, ...]:
    """Seconds per step of each phase: its share of the windows' wall time times the step time
    (windows with gaps between them still give each phase's share); the longest first.

    Example: `per_step([phase_window(spans, lo, hi)], step_s=0.5)`.
    """
    covered = sum(w.hi_ns - w.lo_ns for w in windows) / 1e9
    if covered <= 0 or step_s <= 0:
        return ()
    seconds: dict[str, float] = {}
    names: dict[str, set[str]] = {}
    for w in windows:
        for phase, s in w.seconds:
            seconds[phase] = seconds.get(phase, 0.0) + s
        for phase, n in w.names:
            names.setdefault(phase, set()).update(n)
    out = [
        PhaseTime(p, s / covered * step_s, tuple(sorted(names.get(p, ()))[:3]))
        for p, s in seconds.items()
    ]
    return tuple(sorted(out, key=lambda t: -t.seconds))


@dataclass(frozen=True)
class SlowPhase:
    """The phase that makes a rank slower than the median rank of its group."""

    rank: int
    phase: str
    seconds: float
    """This rank's time in it, per step."""
    median_s: float
    """The group's median rank's time in it, per step."""
    compute_s: float | None = None
    """This rank's forward + backward + optimizer per step (None without such spans)."""
    median_compute_s: float | None = None
    names: tuple[str, ...] = ()

    def text(self, slower: float) -> str:
        """`rank 3 is 2.1x slower: data loading 1.80 s vs median 200 ms a step (...)`."""
        what = (
            self.phase
            if not self.names or self.names == (self.phase,)
            else (f"{self.phase} ({', '.join(self.names)})")
        )
        line = (
            f"rank {self.rank} is {slower:.1f}x slower: {what} {_s(self.seconds)} vs median "
            f"{_s(self.median_s)} a step"
        )
        if (
            self.phase not in COMPUTE
            and self.compute_s is not None
            and self.median_compute_s is not None
        ):
            line += f" (compute {_s(self.compute_s)} vs {_s(self.median_compute_s)})"
        return line


def _s(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.0f} ms"


def _compute(phases: Sequence[PhaseTime]) -> float | None:
    parts = [p.seconds for p in phases if p.phase in COMPUTE]
    return sum(parts) if parts else None


def slow_phase(rank: int, phases: Mapping[int, Sequence[PhaseTime]]) -> SlowPhase | None:
    """The phase of `rank` furthest above the group's median rank (ranks with spans only).

    A known phase (data loading, forward, backward, optimizer) wins over a span that wraps the
    whole step (`train_step`) when it holds at least half of that span's excess.
    Example: `slow_phase(3, {0: [PhaseTime("data loading", 0.2)], 3: [...1.8]}).phase`.
    """
    mine = {p.phase: p for p in phases.get(rank, ())}
    others = [r for r in phases if phases[r]]
    if not mine or len(others) < 2:
        return None
    excess: list[tuple[float, bool, PhaseTime, float]] = []
    for name, p in mine.items():
        times = [next((q.seconds for q in phases[r] if q.phase == name), 0.0) for r in others]
        median = statistics.median(times)
        if p.seconds - median >= MIN_EXCESS_S:
            excess.append((p.seconds - median, name == DATA or name in COMPUTE, p, median))
    if not excess:
        return None
    top = max(e[0] for e in excess)
    named = [e for e in excess if e[1] and e[0] >= top / 2]
    _, _, p, median = max(named or excess, key=lambda e: e[0])
    computes = [c for c in (_compute(phases[r]) for r in others) if c is not None]
    return SlowPhase(
        rank,
        p.phase,
        p.seconds,
        median,
        _compute(phases[rank]),
        statistics.median(computes) if computes else None,
        p.names,
    )
