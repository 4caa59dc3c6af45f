"""Job-scoped alert rules, and which rank judges the rules one rank cannot see alone.

A rule with `scope="job"` (`alert_on(..., scope="job")`,
`configure_alerts(error_burst_scope="job")`) is not raised by the rank that sees a match: each
rank sends its number of matches within the window in its `alerts` heartbeat summary (with
the newest time and the oldest few: bounded), and one rank adds them up every `JUDGE_EVERY_S`
from one hub read: the lowest live rank of the job's first group (rank 0 while it lives).
When no ranked process has such rules (verl actors without RANK), the live process with them
and the lowest probe id judges. The judge reads each rule's count, window and severity from
the summaries, so a rule set on any process is judged, whatever rules the judge itself has.
The monitor's group judge (`monitor.worker_alerts.judge_group`: stragglers, the silent-rank rule)
falls back the same way (`judges_group`). Pure functions here; `run_job_judge` is the probe
thread's hub call.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rankscope.alerts.model import Alert
from rankscope.ranks import format_ranks
from rankscope.runtime.protocol import ProbeState, ProbeStatus
from rankscope.runtime.selection import without_inherited_ranks

__all__ = [
    "FALLBACK_RANKS",
    "JUDGE_EVERY_S",
    "Cooldown",
    "JobRuleRow",
    "job_rule_alerts",
    "job_rule_rows",
    "judge_rank",
    "judges_group",
    "judges_job",
    "run_job_judge",
]

FALLBACK_RANKS = 4
"""Ranks 0-3 may judge (the lowest live one does); with all four gone nobody does, so at most
four ranks of a group read the hub for it."""
JUDGE_EVERY_S = 10.0
UNRANKED_EVERY_S = 60.0
"""How often a process without a rank asks the hub whether it judges, while it does not: only
one judges, and the others' reads are what a job of unranked actors pays for it."""
JUDGE_TIMEOUT_S = 2.0
_NAMED_MAX = 8


def judge_rank(probes: Sequence[ProbeStatus], group: str | None) -> int | None:
    """The lowest rank of `group` whose probe is alive (heartbeating), None when none is."""
    live = [
        p.context.rank
        for p in probes
        if p.context.rank is not None
        and p.state == ProbeState.ALIVE
        and (p.context.group or "") == (group or "")
    ]
    return min(live, default=None)


def judges_group(rank: int | None, group: str | None, probes: Sequence[ProbeStatus]) -> bool:
    """Whether `rank` judges its group: it is the group's lowest live rank (rank 0 while it
    lives; rank 1 when rank 0 died or stopped heartbeating; ...)."""
    return rank is not None and rank == judge_rank(probes, group)


def judges_job(
    rank: int | None,
    group: str | None,
    probes: Sequence[ProbeStatus],
    probe_id: str | None = None,
) -> bool:
    """Whether `rank` judges the job-scoped rules: the judge of the first group (by name) among
    the live processes that have such rules (their `alerts` summary carries `job_rules`), so a
    group without them (another library's actors in the same job) never takes the judging.
    When none of those has a rank, the one with the lowest probe id (`probe_id`: this one's)."""
    ruled = [p for p in probes if _has_job_rules(p)]
    groups = {p.context.group or "" for p in ruled if p.context.rank is not None}
    if groups:
        return (group or "") == min(groups) and judges_group(rank, group, ruled)
    lowest = min((p.info.probe_id for p in ruled), default=None)
    return probe_id is not None and probe_id == lowest


def _has_job_rules(p: ProbeStatus) -> bool:
    summary = p.summaries.get("alerts")
    return p.state == ProbeState.ALIVE and isinstance(summary, dict) and "job_rules" in summary


@dataclass(frozen=True)
class JobRuleRow:
    """One process's recent matches of the job-scoped rules (its `alerts` summary)."""

    who: str
    rank: int | None
    rules: dict[str, dict[str, Any]]
    """Rule key (`error_burst`, `rule:NAME`) -> n, newest, before, count, window_s, severity,
    what, last (`RankRules.job_counts`)."""


def job_rule_rows(probes: Sequence[ProbeStatus]) -> list[JobRuleRow]:
    """Live processes that sent recent job-scoped matches, from the hub's registry."""
    rows = []
    for p in probes:
        summary = p.summaries.get("alerts")
        rules = summary.get("job_rules") if isinstance(summary, dict) else None
        if p.state != ProbeState.DEAD and isinstance(rules, dict) and rules:
            rows.append(JobRuleRow(p.context.label, p.context.rank, rules))
    return rows


def job_rule_alerts(rows: Sequence[JobRuleRow], now: float, job_id: str = "") -> list[Alert]:
    """The job-scoped rules that hold: `count` matches within `window_s` across all rows,
    each alert naming the ranks that contributed and how many each."""
    by_rule: dict[str, list[tuple[JobRuleRow, dict[str, Any], int]]] = {}
    for row in rows:
        for key, entry in row.rules.items():
            try:
                n = _within(entry, now)
            except (KeyError, TypeError, ValueError):
                continue  # a malformed summary counts for nothing
            if n:
                by_rule.setdefault(key, []).append((row, entry, n))
    found = []
    for key, contributions in by_rule.items():
        contributions.sort(key=lambda c: (-c[2], c[0].rank if c[0].rank is not None else 1 << 30))
        entry = contributions[0][1]
        total, count = sum(c[2] for c in contributions), int(entry.get("count", 1))
        if total < count:
            continue
        ranks = [c[0].rank for c in contributions if c[0].rank is not None]
        others = [c[0].who for c in contributions if c[0].rank is None]
        who = f"rank{'s' if len(ranks) > 1 else ''} {format_ranks(ranks)}" if ranks else ""
        who = ", ".join(x for x in (who, *others) if x)
        each = ", ".join(f"{c[0].who}: {c[2]}" for c in contributions[:_NAMED_MAX])
        more = ", ..." if len(contributions) > _NAMED_MAX else ""
        found.append(
            Alert(
                key.removeprefix("rule:"),
                str(entry.get("severity", "warning")),
                f"job: {total} {entry.get('what', 'records')} in {float(entry['window_s']):g} s "
                f"from {who} ({each}{more}); last: {str(entry.get('last', ''))[:200]}",
                now,
                job_id=job_id,
                scope="job",
            )
        )
    return found


def _within(entry: dict[str, Any], now: float) -> int:
    """A rank's matches still within the window at `now`: its number at its heartbeat less
    those of its oldest times sent that have left the window since (exact unless more left
    than it sent; then at most that many too high)."""
    start = now - float(entry["window_s"])
    newest = float(entry["newest"])
    if newest < start:
        return 0
    gone = sum(1 for before in entry["before"] if newest - float(before) < start)
    return max(1, int(entry["n"]) - gone)


@dataclass
class Cooldown:
    """A job-scoped rule that keeps holding is raised again at most once per `cooldown_s`."""

    cooldown_s: float = 60.0
    _last: dict[str, tuple[float, int]] = field(default_factory=dict)

    def admit(self, alerts: Sequence[Alert], now: float) -> list[Alert]:
        out = []
        holding = {a.rule for a in alerts}
        for a in alerts:
            last, count = self._last.get(a.rule, (None, 0))
            if last is not None and now - last < self.cooldown_s:
                self._last[a.rule] = (last, count + 1)
                continue
            self._last[a.rule] = (now, 1)
            out.append(Alert(**{**a.__dict__, "count": count + 1 if last is not None else 1}))
        for rule in [r for r in self._last if r not in holding]:
            del self._last[rule]  # it stopped holding: the next burst is raised at once
        return out


@dataclass
class HubReader:
    """The hub's handle, looked up once and again after a failed call (a restarted hub): the
    judges' one read a turn, never raising and never waiting past `JUDGE_TIMEOUT_S`."""

    hub: Any = None

    def list_probes(self, job_id: str | None, fields: list[str] | None = None) -> list[Any] | None:
        """The job's probes with the summaries in `fields` (None: all), or None when the hub
        is not there or did not answer in time."""
        try:
            import ray

            from rankscope.runtime.hub import find_hub

            if self.hub is None:
                self.hub = find_hub()
            if self.hub is None:
                return None
            rows = ray.get(self.hub.list_probes.remote(job_id, fields), timeout=JUDGE_TIMEOUT_S)
            return without_inherited_ranks(list(rows))
        except Exception:
            self.hub = None  # the hub restarted or moved: look it up again next time
            return None


@dataclass
class _Judge:
    hub: HubReader = field(default_factory=HubReader)
    at: float = 0.0
    judging: bool = False
    """This process judged at its last read (an unranked one then reads every 10 s)."""
    cooldown: Cooldown = field(default_factory=Cooldown)

    def due(self, rank: int | None, now: float) -> bool:
        """Ranks 0-3 read the hub every `JUDGE_EVERY_S`; a process without a rank every
        `UNRANKED_EVERY_S` until it finds it judges; other ranks never."""
        if rank is not None and rank >= FALLBACK_RANKS:
            return False
        every = JUDGE_EVERY_S if rank is not None or self.judging else UNRANKED_EVERY_S
        return now - self.at >= every


_judge = _Judge()


def run_job_judge(
    job_id: str,
    rank: int | None,
    group: str | None,
    cooldown_s: float,
    now: float | None = None,
    probe_id: str | None = None,
) -> list[Alert]:
    """On the probe thread of ranks 0-3 (and of processes without a rank, less often: `due`):
    one hub read (the `alerts` summaries only), and the job-scoped alerts to raise when this
    process is the job's judge. Never raises; a hub that does not answer within
    `JUDGE_TIMEOUT_S` skips this turn."""
    now = time.time() if now is None else now
    if not _judge.due(rank, now):
        return []
    _judge.at = now
    try:
        probes = _judge.hub.list_probes(job_id, ["alerts"])
        if probes is None:
            return []
        _judge.judging = judges_job(rank, group, probes, probe_id)
        if not _judge.judging:
            return []
        _judge.cooldown.cooldown_s = cooldown_s
        return _judge.cooldown.admit(job_rule_alerts(job_rule_rows(probes), now, job_id), now)
    except Exception:
        return []
