"""Health findings from the ranks' step series: pure, no Ray, no I/O. Each detector takes one
rank's samples (or one group's series) and returns findings that name the ranks, the step, the
evidence and what to do. `analyze` runs them all over a job."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Mapping, Sequence

from rankscope.monitor.collectives import align, latency_findings, median_step, stragglers
from rankscope.monitor.model import (
    Finding,
    FindingKind,
    MemoryUse,
    NonFinite,
    RankSeries,
    StepSample,
    Thresholds,
)
from rankscope.monitor.phases import slow_phase
from rankscope.units import human_bytes

__all__ = [
    "analyze",
    "divergence",
    "first_nonfinite",
    "loss_disagreement",
    "loss_levels_disagree",
    "loss_spikes",
    "memory_findings",
    "oscillation",
    "rank_findings",
    "stragglers",
    "throughput",
    "throughput_drift",
]

MIN_STEPS = 20
"""Fewer steps than this say nothing about a trend."""
CHUNK = 10
"""Steps per chunk whose medians the drift and divergence tests compare."""
_MAD_SCALE = 1.4826
"""MAD times this estimates the standard deviation of normal noise."""


def throughput(samples: Sequence[StepSample]) -> tuple[list[int], list[float], str]:
    """Per step: tokens/s when tokens are given, else steps/s; returns (steps, rates, unit)."""
    steps, rates, unit, _, _ = _rate_parts(samples)
    return steps, rates, unit


def _rate_parts(
    samples: Sequence[StepSample],
) -> tuple[list[int], list[float], str, list[float], list[float]]:
    """(steps, rates, unit, tokens per step, seconds per step), index for index."""
    pairs = list(itertools.pairwise(samples))
    with_tokens = [b for _, b in pairs if b.tokens is not None]
    unit = "tokens/s" if len(with_tokens) * 2 >= len(pairs) and pairs else "steps/s"
    steps, rates, tokens, seconds = [], [], [], []
    for a, b in pairs:
        dt = b.t - a.t
        if dt <= 0 or (unit == "tokens/s" and b.tokens is None):
            continue
        gap = float(max(1, b.step - a.step))  # a step history's stride
        n = float(b.tokens) if unit == "tokens/s" and b.tokens is not None else gap
        steps.append(b.step)
        rates.append(n / dt)
        tokens.append(n / gap)
        seconds.append(dt / gap)
    return steps, rates, unit, tokens, seconds


def _change_point(values: Sequence[float], lo: int, hi: int) -> int:
    """The split in [lo, hi) that best separates two levels (least absolute deviation)."""
    best, best_cost = lo, float("inf")
    for i in range(max(1, lo), min(len(values) - 1, hi) + 1):
        before, after = values[max(0, i - CHUNK * 2) : i], values[i : i + CHUNK * 2]
        mb, ma = statistics.median(before), statistics.median(after)
        cost = sum(abs(x - mb) for x in before) + sum(abs(x - ma) for x in after)
        if cost < best_cost:
            best, best_cost = i, cost
    return best


def throughput_drift(
    samples: Sequence[StepSample], threshold: float = 0.15, *, rank: int = -1
) -> Finding | None:
    """Throughput level moving by more than `threshold`, with the step where it changed."""
    steps, rates, unit, tokens, seconds = _rate_parts(samples)
    if len(rates) < MIN_STEPS:
        return None
    chunks = [rates[i : i + CHUNK] for i in range(0, len(rates) - CHUNK + 1, CHUNK)]
    medians = [statistics.median(c) for c in chunks]
    # The split of the chunk medians into two levels that fits best (least absolute deviation).
    best_i, best_change, best_cost = 0, 0.0, float("inf")
    for i in range(1, len(medians)):
        before, after = statistics.median(medians[:i]), statistics.median(medians[i:])
        cost = sum(abs(m - before) for m in medians[:i]) + sum(abs(m - after) for m in medians[i:])
        if before > 0 and cost < best_cost:
            best_i, best_change, best_cost = i, after / before - 1, cost
    if abs(best_change) <= threshold:
        spread = (max(medians) / min(medians) - 1) if min(medians) > 0 else 0.0
        if spread <= threshold:
            return None
        low = medians.index(min(medians))
        return Finding(
            FindingKind.THROUGHPUT_DRIFT,
            (rank,),
            steps[low * CHUNK],
            f"rank {rank} {unit} fluctuates by {spread:.0%} over {len(rates)} steps "
            f"(chunk medians {min(medians):,.0f} to {max(medians):,.0f}); lowest at step "
            f"{steps[low * CHUNK]}",
            "look for periodic work on this rank (checkpointing, evaluation, garbage "
            "collection, data loading stalls) or a shared link",
            value=spread,
        )
    lo, hi = (best_i - 1) * CHUNK, (best_i + 1) * CHUNK
    split = _change_point(rates, lo, hi)
    # Its cause, and the exact step: the tokens per step (exact numbers) or the step time.
    at_tokens = _change_point(tokens, lo, hi)
    t_before, t_after = _levels(tokens, at_tokens)
    if unit == "tokens/s" and t_before > 0 and abs(t_after / t_before - 1) > threshold / 2:
        split = at_tokens
        cause = f"tokens per step {t_before:,.0f} -> {t_after:,.0f}"
    else:
        s_before, s_after = _levels(seconds, split)
        cause = f"step time {s_before * 1e3:,.1f} -> {s_after * 1e3:,.1f} ms"
    before, after = _levels(rates, split)
    change = after / before - 1 if before > 0 else best_change
    word = "dropped" if change < 0 else "rose"
    return Finding(
        FindingKind.THROUGHPUT_DRIFT,
        (rank,),
        steps[split],
        f"rank {rank} {unit} {word} {abs(change):.0%} at step {steps[split]} "
        f"({before:,.1f} -> {after:,.1f}; {cause})",
        "see what changed at that step: a new data shard, a checkpoint, memory pressure, "
        "a slower node or link (`rankscope top`, `rankscope memory`)",
        value=change,
    )


def _levels(values: Sequence[float], split: int) -> tuple[float, float]:
    """Medians of up to 5 chunks before and after `split`."""
    before = values[max(0, split - 5 * CHUNK) : split] or values[:1]
    after = values[split : split + 5 * CHUNK] or values[-1:]
    return statistics.median(before), statistics.median(after)


def _robust_z(value: float, window: Sequence[float]) -> float:
    med = statistics.median(window)
    mad = statistics.median([abs(x - med) for x in window]) * _MAD_SCALE
    floor = 1e-3 * abs(med) + 1e-12  # a flat window: deviations under 0.1% are no spike
    return (value - med) / max(mad, floor)


def _losses(samples: Sequence[StepSample]) -> tuple[list[int], list[float]]:
    pairs = [(s.step, s.loss) for s in samples if s.loss is not None and s.loss - s.loss == 0]
    return [p[0] for p in pairs], [float(p[1]) for p in pairs]


def loss_spikes(
    samples: Sequence[StepSample], thresholds: Thresholds, *, rank: int = -1
) -> Finding | None:
    """Steps whose loss is over `loss_z` robust z-scores above the previous window's median."""
    steps, loss = _losses(samples)
    w = thresholds.loss_window
    spikes = []
    for i in range(min(10, w), len(loss)):
        z = _robust_z(loss[i], loss[max(0, i - w) : i])
        if z > thresholds.loss_z:
            spikes.append((steps[i], loss[i], z))
    if not spikes:
        return None
    step, value, z = max(spikes, key=lambda s: s[2])
    first = spikes[0][0]
    more = f"; {len(spikes)} spikes, the first at step {first}" if len(spikes) > 1 else ""
    return Finding(
        FindingKind.LOSS_SPIKE,
        (rank,),
        step,
        f"rank {rank} loss {value:.4g} at step {step} is {z:.0f} robust z-scores above the "
        f"median of the previous {w} steps{more}",
        "inspect that step's batch; lower the learning rate or clip gradients; skip or "
        "roll back over repeated spikes",
        value=z,
    )


def _smooth(values: Sequence[float], k: int = 5) -> list[float]:
    return [statistics.fmean(values[max(0, i - k + 1) : i + 1]) for i in range(len(values))]


def oscillation(
    samples: Sequence[StepSample], thresholds: Thresholds, *, rank: int = -1
) -> Finding | None:
    """The smoothed loss turning up and down by more than a share of the loss, repeatedly."""
    steps, loss = _losses(samples)
    loss, steps = loss[-thresholds.loss_window * 2 :], steps[-thresholds.loss_window * 2 :]
    if len(loss) < MIN_STEPS:
        return None
    smooth = _smooth(loss)
    level = abs(statistics.median(loss)) or 1.0
    swings, extreme, direction = [], smooth[0], 0
    for i, x in enumerate(smooth[1:], 1):
        move = x - extreme
        if (direction >= 0 and move < 0) or (direction <= 0 and move > 0):
            if abs(move) >= thresholds.oscillation_amplitude * level:
                swings.append((steps[i], abs(move)))
                direction, extreme = (1 if move > 0 else -1), x
            elif direction == 0:
                continue
        if (direction > 0 and x > extreme) or (direction < 0 and x < extreme):
            extreme = x
    if len(swings) < thresholds.oscillation_swings:
        return None
    amplitude = statistics.median(a for _, a in swings) / level
    return Finding(
        FindingKind.LOSS_OSCILLATION,
        (rank,),
        swings[0][0],
        f"rank {rank} loss swings {len(swings)} times over {len(loss)} steps by "
        f"{amplitude:.0%} of its level (median swing), from step {swings[0][0]}",
        "the learning rate is likely too high for this phase: lower it or lengthen warm-up",
        value=float(len(swings)),
    )


def divergence(
    samples: Sequence[StepSample], thresholds: Thresholds, *, rank: int = -1
) -> Finding | None:
    """The loss level well above its best and still rising."""
    steps, loss = _losses(samples)
    if len(loss) < 3 * CHUNK:
        return None
    medians = [statistics.median(loss[i : i + CHUNK]) for i in range(0, len(loss), CHUNK)]
    best = min(medians)
    now = medians[-1]
    rising = medians[-3] < medians[-2] < medians[-1]
    if best <= 0 or now < best * (1 + thresholds.divergence_rise) or not rising:
        return None
    since = steps[medians.index(best) * CHUNK]
    return Finding(
        FindingKind.LOSS_DIVERGENCE,
        (rank,),
        since,
        f"rank {rank} loss rises to {now:.4g} (median of the last {CHUNK} steps), "
        f"{now / best:.1f}x its best {best:.4g} near step {since}",
        "stop or roll back to a checkpoint before it; lower the learning rate; look for "
        "bad data or a non-finite value before it (`rankscope monitor`)",
        value=now / best,
    )


_ORIGIN = {"activation": 0, "loss": 0, "gradient": 2, "grad_norm": 2}
"""At one step, where a NaN starts before where it spreads to: a gradient or grad norm may have
arrived non-finite through an all_reduce from the rank whose activation or loss went first."""


def first_nonfinite(series: Sequence[RankSeries]) -> Finding | None:
    """The first NaN/Inf of any rank: the earliest step, its origin before what it spread to."""
    seen = [(s.first_nonfinite, s) for s in series if s.first_nonfinite is not None]
    if not seen:
        return None
    first: NonFinite
    first, owner = min(seen, key=lambda p: (p[0].step, _ORIGIN.get(p[0].name, 1), p[0].t))
    others = sorted(s.rank for nf, s in seen if s is not owner)
    then = f"; later also ranks {','.join(map(str, others))}" if others else ""
    return Finding(
        FindingKind.NON_FINITE,
        (owner.rank,),
        first.step,
        f"rank {owner.rank} saw the first {first.where}{then}",
        "with `rankscope.watch_nan(model)` the module that produced it is named; check "
        "that step's batch, the learning rate, loss scaling and divisions by zero",
        group=owner.group,
    )


def memory_findings(rank: int, memory: MemoryUse, thresholds: Thresholds) -> list[Finding]:
    out = []
    if memory.device_share > thresholds.device_memory:
        out.append(
            Finding(
                FindingKind.DEVICE_MEMORY,
                (rank,),
                None,
                f"rank {rank} device memory {human_bytes(memory.device_used)} of "
                f"{human_bytes(memory.device_total)} ({memory.device_share:.0%} > "
                f"{thresholds.device_memory:.0%})",
                "reduce the micro-batch or sequence length, checkpoint activations, or shard "
                "optimizer state; `rankscope memory` says where it goes",
                value=memory.device_share,
            )
        )
    if memory.host_share > thresholds.host_memory:
        out.append(
            Finding(
                FindingKind.HOST_MEMORY,
                (rank,),
                None,
                f"rank {rank}'s node memory {human_bytes(memory.host_used)} of "
                f"{human_bytes(memory.host_total)} ({memory.host_share:.0%} > "
                f"{thresholds.host_memory:.0%})",
                "fewer data loader workers or prefetch; look for a host leak "
                "(`rankscope memory --watch`)",
                value=memory.host_share,
            )
        )
    return out


def rank_findings(
    samples: Sequence[StepSample], thresholds: Thresholds, *, rank: int = -1
) -> list[Finding]:
    """What one rank's own series shows: throughput drift and the loss detectors."""
    found = [
        throughput_drift(samples, thresholds.throughput_drift, rank=rank),
        loss_spikes(samples, thresholds, rank=rank),
        oscillation(samples, thresholds, rank=rank),
        divergence(samples, thresholds, rank=rank),
    ]
    return [f for f in found if f is not None]


def loss_disagreement(series: Sequence[RankSeries], thresholds: Thresholds) -> list[Finding]:
    """Ranks of one group whose loss level is off the group's median level."""
    levels = {}
    for s in series:
        _, loss = _losses(s.samples[-thresholds.loss_window :])
        if len(loss) >= 5:
            levels[s.rank] = statistics.median(loss)
    return loss_levels_disagree(levels, thresholds, f"over the last {thresholds.loss_window} steps")


def loss_levels_disagree(
    levels: Mapping[int, float], thresholds: Thresholds, over: str
) -> list[Finding]:
    """Ranks of one group whose loss level (`levels`: rank -> median loss) is off the median."""
    if len(levels) < 3:  # with two ranks, neither is "the odd one"
        return []
    mid = statistics.median(levels.values())
    out = []
    for rank, level in sorted(levels.items()):
        off = (level - mid) / abs(mid) if mid else 0.0
        if abs(off) > thresholds.loss_disagreement:
            out.append(
                Finding(
                    FindingKind.LOSS_DISAGREEMENT,
                    (rank,),
                    None,
                    f"rank {rank} loss level {level:.4g} is {off:+.0%} off its group's median "
                    f"{mid:.4g} {over}",
                    "replicas should agree: check that rank's data shard, its weights "
                    "(`rankscope consistency`) and its input pipeline",
                    value=off,
                )
            )
    return out


def analysable(series: Sequence[RankSeries]) -> list[RankSeries]:
    """The series with something to judge: steps or a non-finite, and, in a group where no
    rank marks steps (a client left unchanged), the collectives."""
    stepped = {s.group for s in series if s.samples}
    return [
        s
        for s in series
        if s.samples or s.first_nonfinite or (s.collectives and s.group not in stepped)
    ]


def analyze(
    series: Sequence[RankSeries],
    thresholds: Thresholds | None = None,
    per_rank: Callable[[RankSeries], bool] | None = None,
) -> list[Finding]:
    """Every finding over a job's ranks; cross-rank ones compare ranks of one group only.
    `per_rank` picks the ranks whose own series the per-rank detectors read (None: all; the
    job report past 64 ranks: the odd ones, `report.trends.odd_ones`)."""
    thresholds = thresholds or Thresholds()
    found: list[Finding] = []
    nonfinite = first_nonfinite(series)
    if nonfinite is not None:
        found.append(nonfinite)
    groups: dict[str, list[RankSeries]] = {}
    for s in series:
        groups.setdefault(s.group, []).append(s)
    for group, members in sorted(groups.items()):
        phases = {s.rank: s.phases for s in members if s.phases}
        for score in stragglers(members, thresholds.straggler):
            if score.is_straggler:
                slow = slow_phase(score.rank, phases)
                found.append(
                    Finding(
                        FindingKind.STRAGGLER,
                        (score.rank,),
                        None,
                        f"{slow.text(score.relative)}; {score.why}" if slow else score.why,
                        "see where that rank spends the time (`rankscope stacks`, tracing): "
                        "its data loading, its node (thermal, other jobs), its shard size",
                        group=group,
                        value=score.relative,
                    )
                )
        alignment = align({s.rank: s.collectives for s in members if s.collectives})
        late = latency_findings(alignment, group, thresholds, median_step(members))
        named = {f.ranks for f in found if f.kind is FindingKind.STRAGGLER and f.group == group}
        found += [f for f in late if f.ranks not in named]  # a straggler's lag: said already
        found += loss_disagreement(members, thresholds)
        for s in members:
            if per_rank is None or per_rank(s):
                own = rank_findings(s.samples, thresholds, rank=s.rank)
                found += [_in_group(f, group) for f in own]
            found += [_in_group(f, group) for f in memory_findings(s.rank, s.memory, thresholds)]
    return found


def _in_group(finding: Finding, group: str) -> Finding:
    from dataclasses import replace

    return replace(finding, group=finding.group or group)
