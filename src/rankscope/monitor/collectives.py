"""Collectives across the ranks of a group: waits per step, who arrives last, and latency.

Pure, over the hang recorder's records (`CollectiveRecord`: group, sequence number, start and end
times). Records of one process group align across ranks by sequence number. Times are each
node's `time.time()`: ranks on different nodes compare as well as their clocks agree (NTP keeps
them within a millisecond or so, well under the 50 ms this looks for). A late arrival or a slow
collective is a finding only when it persists over a window of collectives (`latency_findings`).
"""

from __future__ import annotations

import bisect
import itertools
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rankscope.hang.model import CallState, CollectiveRecord
from rankscope.monitor.model import Finding, FindingKind, RankSeries, StepSample, Thresholds
from rankscope.monitor.straggler import (
    MIN_TREND,
    StragglerScore,
    straggler_scores,
    window_as_one_step,
)

__all__ = [
    "Alignment",
    "align",
    "late_share",
    "latency_findings",
    "latency_limit",
    "median_step",
    "recent_calls",
    "step_waits",
    "stragglers",
    "window_scores",
]


def step_waits(times: Sequence[float], records: Sequence[CollectiveRecord]) -> list[float]:
    """Seconds spent in collectives during each step: `len(times) - 1` values.

    Step k runs from `times[k-1]` to `times[k]`; a collective counts in the step it started in.
    """
    done = sorted(
        (r.start, r.end - r.start)
        for r in records
        if r.end is not None and r.state is CallState.COMPLETED and not r.p2p
    )
    starts = [s for s, _ in done]
    waits = []
    for a, b in itertools.pairwise(times):
        lo, hi = bisect.bisect_left(starts, a), bisect.bisect_left(starts, b)
        waits.append(sum(d for _, d in done[lo:hi]))
    return waits


@dataclass(frozen=True)
class Aligned:
    """One collective (one process group, one sequence number) as every rank saw it."""

    pg: str
    seq: int
    op: str
    starts: dict[int, float]
    ends: dict[int, float]

    @property
    def last(self) -> int:
        return max(self.starts, key=lambda r: (self.starts[r], r))

    @property
    def skew_s(self) -> float:
        """First arrival to last arrival."""
        return max(self.starts.values()) - min(self.starts.values())

    @property
    def latency_s(self) -> float:
        """Last arrival to the last rank's completion."""
        if len(self.ends) < len(self.starts):
            return 0.0
        return max(0.0, max(self.ends.values()) - max(self.starts.values()))


WINDOW_S = 10.0
"""Ranks that mark no steps are compared over their collectives of this last span of time..."""
WINDOW_MIN_CALLS = 32
"""...and at least over their last this many: a straggler is slow over half of them (seconds,
a dozen collectives or more), a pattern and not a sample. Over the whole recorded history
(up to a thousand collectives), a rank slowing after minutes of steady steps was named only
after minutes."""


def window_scores(
    records: Mapping[int, Sequence[CollectiveRecord]], threshold: float
) -> list[StragglerScore]:
    """Straggler scores of ranks that never mark steps, from their recent collectives
    (`recent_calls`): over the calls every rank completed (`straggler.window_as_one_step`)
    and who arrived last."""
    alignment = align(recent_calls(records))
    ranks = {r for a in alignment.collectives for r in a.starts}
    common = [a for a in alignment.collectives if len(a.starts) == len(ranks)]
    calls = {
        r: [(a.starts[r], max(a.starts.values()), a.ends.get(r, a.starts[r])) for a in common]
        for r in ranks
    }
    step_s, wait_s = window_as_one_step(calls)
    return straggler_scores(
        step_s,
        wait_s,
        alignment.last_arrivals,
        alignment.count,
        threshold=threshold,
        unit="over the window",
    )


def recent_calls(
    records: Mapping[int, Sequence[CollectiveRecord]],
) -> dict[int, list[CollectiveRecord]]:
    """Each rank's collectives that started in the last `WINDOW_S` before the newest one of
    any rank, and at least its last `WINDOW_MIN_CALLS`."""
    newest = max((r.start for recs in records.values() for r in recs), default=0.0)
    return {
        rank: [
            r
            for i, r in enumerate(recs)
            if r.start >= newest - WINDOW_S or i >= len(recs) - WINDOW_MIN_CALLS
        ]
        for rank, recs in records.items()
    }


MIN_SKEW_S = 0.005
"""Arrivals closer than this are a tie: back-to-back collectives (one per gradient bucket)
have no meaningful last rank, only the first of a step has; a busy host jitters by a few ms."""


ARRIVAL_SHARE = 0.1
"""A last arrival counts (`Alignment.last_arrivals`) when it came this share of the group's
period between collectives after the first rank, or `MIN_SKEW_S`: who came last by a few ms
of a 100 ms step is the host's scheduling, not a straggler."""


@dataclass(frozen=True)
class Alignment:
    collectives: tuple[Aligned, ...]
    """Those that at least two ranks completed, oldest first."""
    last_arrivals: dict[int, int]
    """Per rank, at how many of the `count` collectives with a real wait it arrived last."""
    count: int
    """Collectives whose first and last arrival are far enough apart (`ARRIVAL_SHARE`)."""


def align(
    records: Mapping[int, Sequence[CollectiveRecord]], *, min_skew_s: float = MIN_SKEW_S
) -> Alignment:
    """Align the ranks' records of one group by (process group, sequence number)."""
    by_key: dict[tuple[str, int], dict[int, CollectiveRecord]] = {}
    for rank, recs in records.items():
        for r in recs:
            if r.p2p or r.state is not CallState.COMPLETED or r.end is None:
                continue
            by_key.setdefault((r.group, r.seq), {})[rank] = r
    aligned = []
    for (pg, seq), got in by_key.items():
        if len(got) < 2:
            continue
        op = next(iter(got.values())).op
        aligned.append(
            Aligned(
                pg,
                seq,
                op,
                {k: v.start for k, v in got.items()},
                {k: v.end for k, v in got.items() if v.end is not None},
            )
        )
    aligned.sort(key=lambda a: min(a.starts.values()))
    floor = max(min_skew_s, ARRIVAL_SHARE * _period(aligned))
    waited = [a for a in aligned if a.skew_s >= floor]
    last = Counter(a.last for a in waited)
    return Alignment(tuple(aligned), dict(last), len(waited))


LATE_WINDOW = 16
"""Waited collectives of one process group that the late-arrival rule looks at together (what
a heartbeat carries of each rank): the rule slides this window over the records it has."""
MIN_LATE = 3
"""A rank must be the last arrival at this many collectives of a window, whatever the share:
once is a sample, not a finding."""


def late_share(n_ranks: int) -> float:
    """The share of a window's waited collectives a rank must arrive last at to be "late in
    most of them": 3/n clamped to [0.5, 0.9], so that chance (1/n) never is."""
    return max(0.5, min(0.9, 3.0 / max(1, n_ranks)))


def latency_limit(thresholds: Thresholds, step_s: float) -> float:
    """Seconds of lateness (or latency) that count: the floor, or a share of the step time."""
    return max(thresholds.collective_latency_s, thresholds.late_step_share * step_s)


def latency_findings(
    alignment: Alignment, group: str, thresholds: Thresholds, step_s: float = 0.0
) -> list[Finding]:
    """A rank that arrives late persistently, and a group whose collectives are slow, each
    over `latency_limit` (`step_s`: the group's median step time; 0 when the ranks mark no
    steps, and then the median interval between the group's collectives stands in for it).

    Persistence, not a sample: a rank is late when, within a window of `LATE_WINDOW`
    collectives that waited (arrivals `MIN_SKEW_S` apart), it arrived last at `late_share`
    of them (and at least `MIN_LATE`), by a median over the limit. One late arrival, or
    arrival skew at the machine's normal jitter (a different last rank each time), is none.
    """
    findings = []
    by_pg: dict[str, list[Aligned]] = {}
    for a in alignment.collectives:
        by_pg.setdefault(a.pg, []).append(a)
    label = f"{group}/pg {{pg}}" if group else "pg {pg}"
    for pg, calls in by_pg.items():
        limit = latency_limit(thresholds, step_s or _period(calls))
        waited = [a for a in calls if a.skew_s >= MIN_SKEW_S]
        for late, window, skews in _persistently_late(waited, limit):
            others = sorted({r for a in window for r in a.starts} - {late})
            worst = max(window, key=lambda a: (a.last == late, a.skew_s))
            median = statistics.median(skews)
            findings.append(
                Finding(
                    FindingKind.COLLECTIVE_LATENCY,
                    (late,),
                    None,
                    f"{label.format(pg=pg)}: rank {late} entered {len(skews)} of "
                    f"{len(window)} collectives last (#{window[0].seq} to #{window[-1].seq}), "
                    f"{median * 1e3:.0f} ms after the first rank at the median (limit "
                    f"{limit * 1e3:.0f} ms), up to {worst.skew_s * 1e3:.0f} ms at {worst.op} "
                    f"#{worst.seq}; ranks {','.join(map(str, others))} waited for it",
                    f"see what rank {late} does before those collectives (`rankscope stacks`, "
                    "data loading, a host sync); a steady lag is a straggler",
                    group=pg,
                    value=median,
                )
            )
        recent = calls[-LATE_WINDOW:]
        latencies = [a.latency_s for a in recent]
        median = statistics.median(latencies)
        if len(recent) >= MIN_LATE and median > limit:
            lasts = Counter(a.last for a in recent).most_common(1)[0][0]
            findings.append(
                Finding(
                    FindingKind.COLLECTIVE_LATENCY,
                    tuple(sorted({r for a in recent for r in a.starts})),
                    None,
                    f"{label.format(pg=pg)}: collectives take {median * 1e3:.0f} ms (median "
                    f"of the last {len(recent)}, limit {limit * 1e3:.0f} ms) from the last "
                    f"rank's arrival to completion; rank {lasts} arrives last most often",
                    "check the links between the group's nodes (`rankscope comm-bench`) and "
                    "the message sizes; overlap communication with compute",
                    group=pg,
                    value=median,
                )
            )
    return findings


def _persistently_late(
    waited: Sequence[Aligned], limit: float
) -> list[tuple[int, Sequence[Aligned], list[float]]]:
    """Per rank found late, its worst window (the highest median lateness): (rank, the
    window, its lateness at the collectives of the window it arrived last at). One pass: the
    window's count of last arrivals slides with it (a big group's report reads thousands)."""
    n = min(LATE_WINDOW, len(waited))
    if n < MIN_LATE:
        return []
    lasts = [a.last for a in waited]
    skews = [a.skew_s for a in waited]
    need = max(MIN_LATE, late_share(max(len(a.starts) for a in waited)) * n)
    count = Counter(lasts[:n])
    best: dict[int, tuple[float, int, list[float]]] = {}
    for i in range(len(waited) - n + 1):
        if i:
            count[lasts[i - 1]] -= 1
            count[lasts[i + n - 1]] += 1
        rank, times = count.most_common(1)[0]
        if times < need:
            continue
        late = [skews[j] for j in range(i, i + n) if lasts[j] == rank]
        median = statistics.median(late)
        if median > limit and median > best.get(rank, (0.0,))[0]:
            best[rank] = (median, i, late)
    return [(r, waited[i : i + n], late) for r, (_, i, late) in sorted(best.items())]


def _period(calls: Sequence[Aligned]) -> float:
    """The median time between consecutive collectives' first arrivals (0 with under two)."""
    firsts = [min(a.starts.values()) for a in calls[-LATE_WINDOW - 1 :]]
    gaps = [b - a for a, b in itertools.pairwise(firsts)]
    return statistics.median(gaps) if gaps else 0.0


def _durations(samples: Sequence[StepSample]) -> tuple[list[float], list[float]]:
    """Step times, and seconds per step between samples (a step history keeps one per stride)."""
    times = [s.t for s in samples]
    return times, [(b.t - a.t) / max(1, b.step - a.step) for a, b in itertools.pairwise(samples)]


def median_step(members: Sequence[RankSeries]) -> float:
    """The group's median seconds a step (0 when no rank marks steps)."""
    per_rank = [statistics.median(d) for _, d in map(_durations, (m.samples for m in members)) if d]
    return statistics.median(per_rank) if per_rank else 0.0


def stragglers(series: Sequence[RankSeries], threshold: float = 1.2) -> list[StragglerScore]:
    """Straggler scores of one group's ranks, from their steps and recorded collectives."""
    step_s, wait_s, records = {}, {}, {}
    for s in series:
        times, durations = _durations(s.samples)
        if len(durations) < MIN_TREND:  # a step or two (start-up) is a sample, not a finding
            continue
        step_s[s.rank] = durations
        if s.collectives:
            gaps = [max(1, b.step - a.step) for a, b in itertools.pairwise(s.samples)]
            waits = step_waits(times, s.collectives)
            wait_s[s.rank] = [w / g for w, g in zip(waits, gaps, strict=True)]
            records[s.rank] = s.collectives
    if not any(s.samples for s in series):  # nobody marks steps: score the whole window
        return window_scores({s.rank: s.collectives for s in series if s.collectives}, threshold)
    alignment = align(records)
    return straggler_scores(
        step_s, wait_s or None, alignment.last_arrivals, alignment.count, threshold=threshold
    )
