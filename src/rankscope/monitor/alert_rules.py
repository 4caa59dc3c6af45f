"""The monitor's findings as alerts: pure, no Ray, no I/O.

Which findings become alerts (`SEVERITY`, `alerted`), one alert per finding (`finding_alerts`),
the cross-rank rules over the hub's heartbeat summaries (`group_findings`: stragglers, loss
disagreement and collective latency, what one rank cannot see alone), and `AlertGate`, which
decides what to raise now, what to hold back within the cooldown, and what stopped holding
(resolved).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rankscope.alerts.analysis import AlertGate as BaseGate
from rankscope.alerts.model import Alert
from rankscope.monitor.analysis import first_nonfinite, loss_levels_disagree
from rankscope.monitor.collectives import align, latency_findings, window_scores
from rankscope.monitor.model import Finding, FindingKind, RankSeries, Thresholds
from rankscope.monitor.straggler import MIN_TREND, StragglerScore, straggler_scores
from rankscope.monitor.view import RankInput, arrivals

__all__ = [
    "ONCE",
    "PERSIST_S",
    "SEVERITY",
    "AlertGate",
    "Persistence",
    "alerted",
    "finding_alerts",
    "group_findings",
]

SEVERITY = {
    FindingKind.NON_FINITE: "critical",
    FindingKind.LOSS_DIVERGENCE: "error",
    FindingKind.LOSS_DISAGREEMENT: "error",
    FindingKind.STRAGGLER: "warning",
    FindingKind.LOSS_SPIKE: "warning",
    FindingKind.THROUGHPUT_DRIFT: "warning",
    FindingKind.COLLECTIVE_LATENCY: "warning",
}
"""The findings that become alerts, and how bad each is. Memory has the alerts feature's own
rules; oscillation, and throughput that rises or only fluctuates, stay in `rankscope monitor`
and `top` (on a shared machine they are noisy, and an alert makes `rankscope alerts` exit 1)."""
ONCE = frozenset({FindingKind.NON_FINITE, FindingKind.LOSS_SPIKE})
"""Events at one step: raised once per step, never repeated nor resolved."""
MAX_CHARS = 240
MAX_KEYS = 1000


def alerted(f: Finding) -> bool:
    """Whether this finding becomes an alert: its kind is alerted, and a throughput drift is a
    drop (its value, the change, below 0; a rise or a fluctuation's spread is above)."""
    return f.kind in SEVERITY and not (f.kind is FindingKind.THROUGHPUT_DRIFT and f.value >= 0)


def finding_alerts(findings: Iterable[Finding], now: float, job_id: str = "") -> list[Alert]:
    """One alert per finding of an alerted kind; the message is the evidence (it names the rank).

    Example: `finding_alerts(analyze(series), time.time())`.
    """
    out = []
    for f in findings:
        severity = SEVERITY.get(f.kind)
        if severity is None or not alerted(f):
            continue
        out.append(
            Alert(
                rule=f.kind.value,
                severity=severity,
                message=f.evidence[:MAX_CHARS],
                time=now,
                rank=f.ranks[0] if len(f.ranks) == 1 else None,
                group=f.group or None,
                job_id=job_id,
            )
        )
    return out


NONFINITE_SETTLE_S = 2.5
"""A group's first NaN is named once it was seen this long ago (two heartbeats): an all_reduce
spreads it to every rank at one step, and the rank it began on may say so a heartbeat after
the ranks it reached."""


def group_findings(
    inputs: Sequence[RankInput], thresholds: Thresholds, now: float | None = None
) -> list[Finding]:
    """Stragglers, loss disagreement and collective latency within each group, from the
    heartbeat summaries.

    A summary carries medians of the recent steps, so the straggler score here is the relative
    one (and the last-arrival share), for ranks whose medians span `MIN_TREND` steps or more:
    `rankscope monitor` also scores a rank against its own best. The latency rules (a rank late
    at most of a window of collectives, a slow collective) see the collectives the heartbeats
    carry (the hang summary's last 16 a rank), against the group's median step time.
    """
    groups: dict[str, list[RankInput]] = {}
    unstepped: dict[str, list[RankInput]] = {}
    found: list[Finding] = _first_nonfinite(inputs, now)
    for i in inputs:
        if i.state == "alive" and i.summary is not None and i.summary.step_s > 0:
            if i.summary.steps_over >= MIN_TREND:  # a step or two is a sample (start-up)
                groups.setdefault(i.group, []).append(i)
        elif i.state == "alive" and i.collectives:
            unstepped.setdefault(i.group, []).append(i)
    for group, members in sorted(unstepped.items()):
        if group not in groups:  # nobody marks steps (a client left unchanged): the collectives
            records = {m.rank: m.collectives for m in members}
            slow = _stragglers(group, window_scores(records, thresholds.straggler))
            found += slow + _unnamed(latency_findings(align(records), group, thresholds), slow)
    for group, members in sorted(groups.items()):
        scores = straggler_scores(
            {m.rank: [m.summary.step_s] for m in members if m.summary},
            {m.rank: [m.summary.wait_s] for m in members if m.summary},
            *arrivals(members),
            threshold=thresholds.straggler,
        )
        slow = _stragglers(group, scores)
        found += slow
        levels = {
            m.rank: m.summary.loss_level
            for m in members
            if m.summary is not None and m.summary.loss_level is not None
        }
        found += [
            _in(f, group) for f in loss_levels_disagree(levels, thresholds, "over its recent steps")
        ]
        alignment = align({m.rank: m.collectives for m in members if m.collectives})
        step_s = statistics.median(m.summary.step_s for m in members if m.summary)
        found += _unnamed(latency_findings(alignment, group, thresholds, step_s), slow)
    return found


def _first_nonfinite(inputs: Sequence[RankInput], now: float | None) -> list[Finding]:
    """Each group's first NaN/Inf, named at the rank it began on: one all_reduce spreads it to
    every rank at the same step, so a rank's own alert would name whichever heartbeat first.
    With `now`, a group's is named only once `NONFINITE_SETTLE_S` passed since its first."""
    by_group: dict[str, list[RankSeries]] = {}
    for i in inputs:
        if i.summary is not None and i.summary.first_nonfinite is not None:
            series = RankSeries(i.rank, i.group, i.node, i.role, (), i.summary.first_nonfinite)
            by_group.setdefault(i.group, []).append(series)
    settled = {
        group
        for group, series in by_group.items()
        if now is None
        or now - min(s.first_nonfinite.t for s in series if s.first_nonfinite) >= NONFINITE_SETTLE_S
    }
    return [f for group in sorted(settled) if (f := first_nonfinite(by_group[group]))]


def _unnamed(late: Iterable[Finding], slow: Sequence[Finding]) -> list[Finding]:
    """The late arrivals of ranks that are not stragglers: a straggler's alert says it already."""
    named = {f.ranks for f in slow}
    return [f for f in late if f.ranks not in named]


def _stragglers(group: str, scores: Iterable[StragglerScore]) -> list[Finding]:
    return [
        Finding(
            FindingKind.STRAGGLER,
            (s.rank,),
            None,
            s.why,
            "see where that rank spends the time (`rankscope monitor`, tracing)",
            group=group,
            value=s.relative,
        )
        for s in scores
        if s.is_straggler
    ]


def _in(f: Finding, group: str) -> Finding:
    from dataclasses import replace

    return replace(f, group=group)


@dataclass
class AlertGate(BaseGate):
    """The alerts feature's gate, with the monitor's once-only kinds (`ONCE`): a NaN or a spike
    at one step is raised once for that step, never repeated nor resolved.

    Example: `raise_now, resolved = gate.update(finding_alerts(found, now), now, steps)`.
    """

    once: frozenset[str] = frozenset(k.value for k in ONCE)


PERSIST_S = 20.0
"""A straggler or a late arrival becomes an alert only once the group's judge has seen it at
every turn for this long (three turns, 10 s apart): the heartbeats carry a rank's last 16
collectives, a second or two of a fast job, and a rank the host descheduled for that long is
no straggler."""
PERSISTENT = frozenset({FindingKind.STRAGGLER, FindingKind.COLLECTIVE_LATENCY})


class Persistence:
    """Since when each straggler or late-arrival finding has been seen at every judge turn."""

    def __init__(self) -> None:
        self._since: dict[tuple[FindingKind, tuple[int, ...], str], float] = {}

    def held(self, findings: Sequence[Finding], now: float) -> list[Finding]:
        """The findings to raise now: the others, and the persistent kinds seen since
        `PERSIST_S` ago at least (a finding missing from a turn starts over)."""
        seen = {(f.kind, f.ranks, f.group) for f in findings if f.kind in PERSISTENT}
        self._since = {key: self._since.get(key, now) for key in seen}
        return [
            f
            for f in findings
            if f.kind not in PERSISTENT
            or now - self._since[(f.kind, f.ranks, f.group)] >= PERSIST_S
        ]
