"""Collectives across the ranks of a group: waits per step, who arrives last, and latency.

Pure, over the hang recorder's records (`CollectiveRecord`: group, sequence number, start and end
times). Records of one process group align across ranks by sequence number. Times are each
node's `time.time()`: ranks on different nodes compare as well as their clocks agree (NTP keeps
them within a millisecond or so, well under the 50 ms this looks for).
"""

from __future__ import annotations

import bisect
import itertools
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rankscope.hang.model import CallState, CollectiveRecord
from rankscope.monitor.model import Finding, FindingKind
from rankscope.monitor.straggler import StragglerScore, straggler_scores, window_as_one_step

__all__ = ["Alignment", "align", "latency_findings", "step_waits", "window_scores"]


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


def window_scores(
    records: Mapping[int, Sequence[CollectiveRecord]], threshold: float
) -> list[StragglerScore]:
    """Straggler scores of ranks that never mark steps, from their collectives: over the
    calls every rank completed (`straggler.window_as_one_step`) and who arrived last."""
    alignment = align(records)
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


MIN_SKEW_S = 0.005
"""Arrivals closer than this are a tie: back-to-back collectives (one per gradient bucket)
have no meaningful last rank, only the first of a step has; a busy host jitters by a few ms."""


@dataclass(frozen=True)
class Alignment:
    collectives: tuple[Aligned, ...]
    """Those that at least two ranks completed, oldest first."""
    last_arrivals: dict[int, int]
    """Per rank, at how many of the `count` collectives with a real wait it arrived last."""
    count: int
    """Collectives whose first and last arrival are `MIN_SKEW_S` or more apart."""


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
    waited = [a for a in aligned if a.skew_s >= min_skew_s]
    last = Counter(a.last for a in waited)
    return Alignment(tuple(aligned), dict(last), len(waited))


def latency_findings(alignment: Alignment, group: str, threshold_s: float) -> list[Finding]:
    """A late arrival (skew) and a slow collective (latency), each over `threshold_s`."""
    findings = []
    by_pg: dict[str, list[Aligned]] = {}
    for a in alignment.collectives:
        by_pg.setdefault(a.pg, []).append(a)
    label = f"{group}/pg {{pg}}" if group else "pg {pg}"
    for pg, calls in by_pg.items():
        worst = max(calls, key=lambda a: a.skew_s)
        if worst.skew_s > threshold_s:
            late = worst.last
            others = sorted(r for r in worst.starts if r != late)
            findings.append(
                Finding(
                    FindingKind.COLLECTIVE_LATENCY,
                    (late,),
                    None,
                    f"{label.format(pg=pg)}: rank {late} entered {worst.op} #{worst.seq} "
                    f"{worst.skew_s * 1e3:.0f} ms after the first rank; ranks "
                    f"{','.join(map(str, others))} waited for it",
                    f"see what rank {late} does before that collective (`rankscope stacks`, "
                    "data loading, a host sync); a steady lag is a straggler",
                    group=pg,
                    value=worst.skew_s,
                )
            )
        latencies = [a.latency_s for a in calls]
        median = statistics.median(latencies)
        if median > threshold_s:
            lasts = Counter(a.last for a in calls).most_common(1)[0][0]
            findings.append(
                Finding(
                    FindingKind.COLLECTIVE_LATENCY,
                    tuple(sorted({r for a in calls for r in a.starts})),
                    None,
                    f"{label.format(pg=pg)}: collectives take {median * 1e3:.0f} ms (median "
                    f"of {len(calls)}) from the last rank's arrival to completion; rank "
                    f"{lasts} arrives last most often",
                    "check the links between the group's nodes (`rankscope comm-bench`) and "
                    "the message sizes; overlap communication with compute",
                    group=pg,
                    value=median,
                )
            )
    return findings
