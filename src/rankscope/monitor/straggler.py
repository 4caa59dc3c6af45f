"""The straggler score: which rank of a group computes slower than the others, and than itself.

Pure, no Ray and no I/O, shared by the monitor and the tracing view. In synchronous training every
rank's step takes the same wall time (the fast ranks wait in the collective for the slow one), so
the step time alone names nobody: the score is each rank's step time minus its collective wait,
its *compute*, compared with the median rank of its group (`relative`) and with its own best
(`individual`), plus how often it was the last to arrive at a collective.

    scores = straggler_scores({0: [0.10, 0.10], 1: [0.10, 0.10]}, {0: [0.04, 0.04], 1: [0, 0]})
    scores[0].rank  # 1: it computes 100 ms a step, rank 0 computes 60 ms and waits for it
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["StragglerScore", "straggler_scores", "window_as_one_step"]

DEFAULT_THRESHOLD = 1.2
"""A rank whose compute is 20% over the group median (or over its own best) is a straggler."""
DEFAULT_RECENT = 10
"""How many recent steps make the `individual` score's "now"."""
DEFAULT_MIN_DELTA_S = 0.002
"""A rank slower by less than this (seconds a step) is noise, whatever the ratio."""
MIN_COLLECTIVES = 5
"""Fewer collectives than this say nothing about who arrives last."""
MIN_TREND = 5
"""The `individual` score compares two medians of at least this many steps each."""
TRIM = 0.25
"""Over a window (ranks that mark no steps), the share of the longest intervals between
collectives left out of a rank's compute, the same number for every rank: one slow interval
(a pause, a checkpoint) is a sample, a straggler is slow in every interval."""


@dataclass(frozen=True)
class StragglerScore:
    """One rank's score within its group.

    Attributes:
        rank: the rank.
        compute_s: its median step time minus collective wait, in seconds.
        relative: compute against the median rank of the group (1.0 typical, > 1 slower).
        individual: recent compute against its own best (1.0 steady, > 1 it slowed down).
        last_arrival_share: the share of the group's collectives this rank arrived at last.
        is_straggler: one of the scores crossed its threshold.
        why: one line of evidence, empty when the rank is not a straggler.
    """

    rank: int
    compute_s: float
    relative: float
    individual: float
    last_arrival_share: float
    is_straggler: bool
    why: str


def _compute_series(steps: Sequence[float], waits: Sequence[float] | None) -> list[float]:
    """Per-step compute: step time minus the wait of the same step, aligned from the end."""
    steps = [float(s) for s in steps]
    if not waits:
        return steps
    n = min(len(steps), len(waits))
    if n == 0:
        return steps
    head = steps[: len(steps) - n]
    tail = steps[len(steps) - n :]
    w = [float(x) for x in waits[len(waits) - n :]]
    return head + [max(0.0, s - x) for s, x in zip(tail, w, strict=True)]


def _individual(compute: Sequence[float], recent: int) -> tuple[float, float]:
    """Median of the last `recent` steps against the best median of any chunk as long.

    Returns the ratio and the difference in seconds.
    """
    if len(compute) < 2 * MIN_TREND:  # a step or two against itself is a sample, not a trend
        return 1.0, 0.0
    if len(compute) < 2 * recent:
        recent = max(1, len(compute) // 2)
    now = statistics.median(compute[-recent:])
    chunks = [compute[i : i + recent] for i in range(0, len(compute) - recent + 1, recent)]
    best = min([statistics.median(c) for c in chunks if c] + [now])
    return (now / best if best > 0 else 1.0), now - best


def _noise(compute: Sequence[float], recent: int) -> float:
    """Three standard errors of the difference of two medians of `recent` steps, from the
    rank's own spread (its MAD): a slowdown under it is the chance low of its best chunk
    against the chance high of its last, as on a busy host, not a slowdown."""
    if len(compute) < 2:
        return 0.0
    mid = statistics.median(compute)
    sigma = 1.4826 * statistics.median(abs(x - mid) for x in compute)
    return 3.0 * 1.2533 * sigma * math.sqrt(2.0 / max(1, min(recent, len(compute) // 2)))


def _last_share_threshold(n_ranks: int) -> float:
    """A rank last at more than this share is late beyond chance (1/n is chance)."""
    return max(0.5, min(0.9, 3.0 / max(1, n_ranks)))


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def straggler_scores(
    step_s: Mapping[int, Sequence[float]],
    wait_s: Mapping[int, Sequence[float]] | None = None,
    last_arrivals: Mapping[int, int] | None = None,
    collectives: int = 0,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    recent: int = DEFAULT_RECENT,
    last_share_threshold: float | None = None,
    min_delta_s: float = DEFAULT_MIN_DELTA_S,
    unit: str = "a step",
) -> list[StragglerScore]:
    """Score every rank of ONE group (or role); the worst first.

    Args:
        step_s: per rank, its recent step times in seconds (oldest first).
        wait_s: per rank, the time it waited in collectives during those steps (aligned from
            the end with `step_s`); without it, compute is the step time.
        last_arrivals: per rank, at how many of the group's `collectives` it arrived last.
        collectives: how many collectives `last_arrivals` counts over.
        threshold: `relative` or `individual` at or over this makes a straggler.
        recent: how many recent steps the `individual` score compares with the rank's best.
        last_share_threshold: a last-arrival share at or over this makes a straggler (default:
            3/n clamped to [0.5, 0.9], so that chance, 1/n, never does).
        min_delta_s: a rank must also be this many seconds a step slower (than the median,
            or than its best) to be named: a ratio over a tiny compute time is noise.
        unit: what one value of `step_s` spans, for the message ("over the window" when the
            ranks never mark steps and the caller gives each one value).

    Example:
        straggler_scores({0: [0.1], 1: [0.1], 2: [0.14]})[0].rank  # 2
    """
    if threshold <= 1.0:
        raise ValueError(f"threshold ({threshold}) must be over 1.0: 1.0 is the typical rank")
    ranks = sorted(r for r, s in step_s.items() if len(s) > 0)
    if not ranks:
        return []
    waits = wait_s or {}
    series = {r: _compute_series(step_s[r], waits.get(r)) for r in ranks}
    compute = {r: statistics.median(series[r]) for r in ranks}
    group_median = statistics.median(compute.values())
    share_limit = (
        last_share_threshold
        if last_share_threshold is not None
        else _last_share_threshold(len(ranks))
    )
    arrivals = last_arrivals or {}
    scores = []
    for r in ranks:
        relative = compute[r] / group_median if group_median > 0 else 1.0
        individual, slowed_s = _individual(series[r], recent)
        share = arrivals.get(r, 0) / collectives if collectives > 0 else 0.0
        reasons = []
        if len(ranks) > 1 and relative >= threshold and compute[r] - group_median >= min_delta_s:
            reasons.append(
                f"computes {relative:.2f}x the group median "
                f"({_ms(compute[r])} vs {_ms(group_median)} {unit})"
            )
        if individual >= threshold and slowed_s >= max(min_delta_s, _noise(series[r], recent)):
            reasons.append(f"slowed to {individual:.2f}x its own best")
        if len(ranks) > 1 and collectives >= MIN_COLLECTIVES and share >= share_limit:
            reasons.append(
                f"last to arrive at {arrivals.get(r, 0)} of {collectives} collectives "
                f"({share:.0%}, chance is {1 / len(ranks):.0%})"
            )
        scores.append(
            StragglerScore(
                rank=r,
                compute_s=compute[r],
                relative=relative,
                individual=individual,
                last_arrival_share=share,
                is_straggler=bool(reasons),
                why=f"rank {r} " + "; ".join(reasons) if reasons else "",
            )
        )
    scores.sort(
        key=lambda s: (s.is_straggler, max(s.relative, s.individual), s.last_arrival_share),
        reverse=True,
    )
    return scores


Call = tuple[float, float, float]
"""One collective as one rank saw it: (its entry, the last rank's entry, its exit), seconds."""


def window_as_one_step(
    calls: Mapping[int, Sequence[Call]], min_calls: int = 3
) -> tuple[dict[int, list[float]], dict[int, list[float]]]:
    """Step and wait seconds, one of each per rank, for ranks that never call
    `rankscope.step()` (verl's workers, a Ray Train loop left unchanged): the rank's time from
    its first to its last entry into a collective, and its waits for the last arrival in
    between, as one step. `monitor`, its live judge, `trace` and the report all score so.

    The compute (step less wait) is the rank's intervals between entries, each less its wait,
    with the longest `TRIM` of them left out and the rest scaled to the whole window: one slow
    interval on one rank (a pause, a checkpoint) does not make it a straggler, a rank slow in
    every interval does. Ranks with fewer than `min_calls` calls are left out.
    """
    step_s: dict[int, list[float]] = {}
    wait_s: dict[int, list[float]] = {}
    for rank, own in calls.items():
        if len(own) < min_calls:
            continue
        ordered = sorted(own)
        computes = sorted(
            max(0.0, nxt - start - max(0.0, min(arrival, end, nxt) - start))
            for (start, arrival, end), (nxt, _, _) in itertools.pairwise(ordered)
        )
        kept = computes[: len(computes) - int(len(computes) * TRIM)]
        compute = sum(kept) * len(computes) / len(kept)
        span = ordered[-1][0] - ordered[0][0]
        step_s[rank], wait_s[rank] = [span], [max(0.0, span - compute)]
    return step_s, wait_s
