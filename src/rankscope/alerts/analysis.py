"""The alert rules as pure functions and small state machines: no Ray, no I/O.

`RankRules` runs on each rank (fed the records the logs summary drains and the memory it
reads); `alerts_from_events` and `silent_ranks` run on the CLI side over the run directory's
events and the hub's registry.
"""

from __future__ import annotations

import collections
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rankscope.alerts.model import Alert, AlertSettings, RegexRule
from rankscope.ranks import format_ranks
from rankscope.runtime.protocol import ProbeState, ProbeStatus

__all__ = [
    "ACK_ALL",
    "ACK_EVENT",
    "AlertGate",
    "MemoryReading",
    "RankRules",
    "SilenceRow",
    "acks_from_events",
    "alerts_from_events",
    "apply_acks",
    "silence_rows",
    "silent_ranks",
]

ERROR_LEVELS = frozenset({"ERROR", "CRITICAL"})
ACK_EVENT = "alert_ack"
"""`rankscope alerts --ack`: an event a live probe of the job writes for the CLI (its kind
starts with `alert`, so the alerts' one event read brings it along)."""
ACK_ALL = "*"
_WINDOW_MAX = 10_000
JOB_TIMES_MAX = 1_000
"""Times a rank keeps per job-scoped rule: its last `count` (at most this) are enough to tell
whether the job reached `count`, whatever the other ranks sent."""
JOB_TIMES_SENT = 32
"""Of those, the oldest within the window a heartbeat carries (with their number and the
newest): the ones that leave the window first, so the judge's count stays exact for a
summary up to that many matches stale, within the 4 KiB heartbeat budget."""


@dataclass(frozen=True)
class MemoryReading:
    host_used: int
    host_total: int
    device_used: int = 0
    device_total: int = 0


class RankRules:
    """One rank's rules: ERROR bursts, new error templates, user regexes, memory. Bounded.

    `records(batch, now)` and `memory(reading, host_threshold, device_threshold, now)` return
    the alerts to raise (each at most once per cooldown) and `resolved` the ones that stopped.
    """

    def __init__(self, settings: AlertSettings, who: str) -> None:
        self.settings = settings
        self.who = who
        self._errors: collections.deque[float] = collections.deque(maxlen=_WINDOW_MAX)
        self._templates: set[str] = set()
        self._matches: dict[str, collections.deque[float]] = {}
        self._compiled: dict[str, re.Pattern[str]] = {}
        self._raised: dict[str, tuple[float, int]] = {}
        self._memory_high: set[str] = set()
        self._job: dict[str, collections.deque[float]] = {}
        self._job_last: dict[str, str] = {}
        self._last_error = ""

    def set_rules(self, rules: Sequence[RegexRule]) -> None:
        self.settings = replace(self.settings, rules=tuple(rules))
        self._compiled = {r.name: re.compile(r.pattern) for r in rules}

    def records(self, batch: Iterable[tuple[Any, ...]], now: float) -> list[Alert]:
        """`batch`: (level, message, time, template[, where]) of the records logged since the
        last call; `where` is the logging call's `file.py:line`."""
        found: list[Alert] = []
        s = self.settings
        for level, message, when, template, *rest in batch:
            where = f" ({rest[0]})" if rest and rest[0] else ""
            if level in ERROR_LEVELS:
                self._last_error = f"{message[:160]}{where}"
                if s.error_burst_scope == "job":
                    self._count_for_job("error_burst", s.error_burst, when, message)
                self._errors.append(when)
                if template not in self._templates and len(self._templates) < _WINDOW_MAX:
                    self._templates.add(template)
                    found += self._raise(
                        f"new_error:{template}",
                        "new_error",
                        "warning",
                        f"{self.who}: first {level} of its kind: {message[:200]}{where}",
                        when,
                        repeat=False,
                    )
            for rule in s.rules:
                pattern = self._compiled.get(rule.name)
                if pattern is None or not pattern.search(message):
                    continue
                if rule.scope == "job":  # the judge counts it across ranks (`alerts.worker_judge`)
                    self._count_for_job(f"rule:{rule.name}", rule.count, when, message)
                    continue
                times = self._matches.setdefault(rule.name, collections.deque(maxlen=_WINDOW_MAX))
                times.append(when)
                while times and times[0] < when - rule.window_s:
                    times.popleft()
                if len(times) >= rule.count:
                    what = f"{len(times)} lines" if rule.count > 1 else "a line"
                    found += self._raise(
                        f"rule:{rule.name}",
                        rule.name,
                        rule.severity,
                        f"{self.who}: {what} matching {rule.pattern!r}: {message[:200]}",
                        when,
                    )
        while self._errors and self._errors[0] < now - s.error_window_s:
            self._errors.popleft()
        if s.error_burst_scope == "rank" and len(self._errors) >= s.error_burst:
            found += self._raise(
                "error_burst",
                "error_burst",
                "error",
                f"{self.who}: {len(self._errors)} ERROR records in {s.error_window_s:g} s, the "
                f"last: {self._last_error}",
                now,
            )
        return found

    @property
    def has_job_rules(self) -> bool:
        s = self.settings
        return s.error_burst_scope == "job" or any(r.scope == "job" for r in s.rules)

    def _count_for_job(self, key: str, count: int, when: float, message: str) -> None:
        times = self._job.get(key)
        if times is None or times.maxlen != min(count, JOB_TIMES_MAX):
            times = self._job[key] = collections.deque(times or (), min(count, JOB_TIMES_MAX))
        times.append(when)
        self._job_last[key] = message[:200]

    def job_counts(self, now: float) -> dict[str, dict[str, Any]] | None:
        """The job-scoped rules' matches on this rank within each rule's window, for the
        heartbeat's `alerts` summary: `n` of them, the `newest` time and the oldest (at most
        `JOB_TIMES_SENT`, as seconds `before` the newest); None when there are none."""
        s = self.settings
        rules = {"error_burst": (s.error_burst, s.error_window_s, "error", "ERROR records")}
        for r in s.rules:
            rules[f"rule:{r.name}"] = (
                r.count,
                r.window_s,
                r.severity,
                f"lines matching {r.pattern!r}",
            )
        found: dict[str, dict[str, Any]] = {}
        for key, times in self._job.items():
            if key not in rules:
                continue
            count, window_s, severity, what = rules[key]
            recent = sorted(t for t in times if t >= now - window_s)
            if recent:
                newest = recent[-1]
                found[key] = {
                    "n": len(recent),
                    "newest": round(newest, 3),
                    "before": [round(newest - t, 3) for t in recent[:JOB_TIMES_SENT]],
                    "count": count,
                    "window_s": window_s,
                    "severity": severity,
                    "what": what,
                    "last": self._job_last.get(key, ""),
                }
        return found or None

    def memory(
        self, reading: MemoryReading, host_threshold: float, device_threshold: float, now: float
    ) -> tuple[list[Alert], list[str]]:
        """Alerts for memory above the thresholds, and the rules that fell back below."""
        found: list[Alert] = []
        resolved: list[str] = []
        checks = (
            ("host_memory", reading.host_used, reading.host_total, host_threshold, "host"),
            (
                "device_memory",
                reading.device_used,
                reading.device_total,
                device_threshold,
                "device",
            ),
        )
        for rule, used, total, threshold, what in checks:
            if total <= 0:
                continue
            fraction = used / total
            if fraction > threshold:
                self._memory_high.add(rule)
                found += self._raise(
                    rule,
                    rule,
                    "critical" if fraction > 0.97 else "error",
                    f"{self.who}: {what} memory {fraction:.0%} used, above {threshold:.0%}",
                    now,
                )
            elif rule in self._memory_high:
                self._memory_high.discard(rule)
                self._raised.pop(rule, None)
                resolved.append(rule)
        return found, resolved

    def _raise(
        self, key: str, rule: str, severity: str, message: str, now: float, *, repeat: bool = True
    ) -> list[Alert]:
        last, count = self._raised.get(key, (None, 0))
        if last is not None and (not repeat or now - last < self.settings.cooldown_s):
            self._raised[key] = (last, count + 1)
            return []
        self._raised[key] = (now, 1)
        if len(self._raised) > _WINDOW_MAX:
            self._raised.pop(next(iter(self._raised)))
        return [Alert(rule, severity, message, now, count=count + 1 if last is not None else 1)]


def alerts_from_events(
    events: Iterable[dict[str, Any]], now: float, active_for_s: float, job_id: str = ""
) -> list[Alert]:
    """The run directory's `alert` / `alert_resolved` events as alerts, newest first: one per
    (rule, process, rank the alert is about: a group's judge raises one rule about several
    ranks), active when raised within `active_for_s` and neither resolved nor acknowledged
    (`alert_ack`) since."""
    events = list(events)
    latest: dict[tuple[str, str, str], Alert] = {}
    for e in events:
        payload = e.get("payload") or {}
        if not isinstance(payload, dict) or "rule" not in payload:
            continue
        key = (str(payload["rule"]), str(e.get("probe_id", "")), str(payload.get("rank")))
        when = float(e.get("time") or payload.get("time") or 0.0)
        if e.get("kind") == "alert_resolved":
            for k in [k for k in latest if k[:2] == key[:2]]:
                if "rank" not in payload or k == key:  # no rank: every alert of the rule
                    latest[k] = replace(latest[k], active=False)
            continue
        if e.get("kind") != "alert":
            continue
        latest[key] = Alert(
            rule=str(payload["rule"]),
            severity=str(payload.get("severity", "warning")),
            message=str(payload.get("message", "")),
            time=when,
            rank=payload.get("rank"),
            pid=int(payload.get("pid") or 0),
            group=payload.get("group"),
            count=int(payload.get("count") or 1),
            active=now - when <= active_for_s,
            job_id=job_id,
            scope=str(payload.get("scope") or "rank"),
        )
    return sorted(apply_acks(latest.values(), acks_from_events(events)), key=lambda a: -a.time)


def acks_from_events(events: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Rule (or `*`) -> its latest acknowledgement's time, from `alert_ack` events."""
    acks: dict[str, float] = {}
    for e in events:
        payload = e.get("payload")
        if e.get("kind") == ACK_EVENT and isinstance(payload, dict) and "rule" in payload:
            rule, when = str(payload["rule"]), float(payload.get("time") or e.get("time") or 0)
            acks[rule] = max(acks.get(rule, 0.0), when)
    return acks


def apply_acks(alerts: Iterable[Alert], acks: dict[str, float]) -> list[Alert]:
    """`acks`: rule (or `*`: every rule) -> when it was acknowledged; an alert raised (last)
    before that is acknowledged and no longer active; one raised after stays as it is."""
    out = []
    for a in alerts:
        when = max(acks.get(a.rule, 0.0), acks.get(ACK_ALL, 0.0))
        out.append(replace(a, active=False, acked=True) if when and a.time <= when else a)
    return out


@dataclass(frozen=True)
class SilenceRow:
    """What the silence rule reads of one ranked process from the hub's registry."""

    rank: int
    group: str | None
    alive: bool
    step: int
    last_activity: float
    """The later of its last `rankscope.step()` and its last log record."""
    pid: int = 0


def silent_ranks(
    rows: Sequence[SilenceRow], now: float, silent_after_s: float, job_id: str = ""
) -> list[Alert]:
    """Ranks that stepped before and are silent for `silent_after_s` (no step, no log) while
    the other ranks of their group continue; a group that is idle as a whole is not silent."""
    by_group: dict[str | None, list[SilenceRow]] = collections.defaultdict(list)
    for row in rows:
        if row.alive and row.step > 0:
            by_group[row.group].append(row)
    found = []
    for group_rows in by_group.values():
        going = [r for r in group_rows if now - r.last_activity < silent_after_s]
        if not going:
            continue
        for r in group_rows:
            quiet = now - r.last_activity
            if quiet >= silent_after_s:
                others = format_ranks(o.rank for o in going)
                found.append(
                    Alert(
                        "silent_rank",
                        "error",
                        f"rank {r.rank}: no step and no log for {quiet:.0f} s while ranks "
                        f"{others} continue",
                        r.last_activity + silent_after_s,  # when it became silent
                        rank=r.rank,
                        pid=r.pid,
                        group=r.group,
                        job_id=job_id,
                    )
                )
    return found


MAX_GATE_KEYS = 1000


Key = tuple[str, "int | None", "int | None"]


@dataclass
class AlertGate:
    """What to raise of the alerts that hold now: new ones at once, repeats at most once per
    `cooldown_s` (counted between), and the keys that held before and no longer do (resolved).

    Example: `raise_now, resolved = gate.update(alerts, now)`.
    """

    cooldown_s: float = 60.0
    once: frozenset[str] = frozenset()
    """Rules of events at one step (keyed by step): raised once, never repeated nor resolved."""

    def __post_init__(self) -> None:
        self._last: dict[Key, tuple[float, int]] = {}

    def update(
        self, alerts: Sequence[Alert], now: float | None = None, steps: Sequence[int | None] = ()
    ) -> tuple[list[Alert], list[tuple[str, int | None]]]:
        """`steps`: each alert's step (index for index), which keys the once-only kinds."""
        now = time.time() if now is None else now
        once = self.once
        out, holding = [], set()
        for i, a in enumerate(alerts):
            step = steps[i] if i < len(steps) and a.rule in once else None
            key = (a.rule, a.rank, step)
            holding.add(key)
            last = self._last.get(key)
            if last is not None and (a.rule in once or now - last[0] < self.cooldown_s):
                self._last[key] = (last[0], last[1] + 1)
                continue
            count = last[1] + 1 if last is not None else 1
            self._last[key] = (now, 1)
            out.append(Alert(**{**a.__dict__, "time": now, "count": count}))
        while len(self._last) > MAX_GATE_KEYS:  # once-only keys stay; the oldest go first
            del self._last[next(iter(self._last))]
        resolved = []
        for key in list(self._last):
            if key not in holding and key[0] not in once:
                del self._last[key]
                resolved.append((key[0], key[1]))
        return out, resolved


def silence_rows(probes: list[ProbeStatus]) -> list[SilenceRow]:
    """Ranked processes with their last step or log record, whichever came later."""
    rows = []
    for p in probes:
        if p.context.rank is None:
            continue
        last_log = 0.0
        logs = p.summaries.get("logs")
        if isinstance(logs, dict):
            times = [t.get("last_time", 0.0) for t in logs.get("templates") or ()]
            last_log = max((float(t) for t in times), default=0.0)
        rows.append(
            SilenceRow(
                rank=p.context.rank,
                group=p.context.group,
                alive=p.state == ProbeState.ALIVE,
                step=p.progress.step,
                last_activity=max(p.progress.last_progress, last_log),
                pid=p.context.pid,
            )
        )
    return rows
