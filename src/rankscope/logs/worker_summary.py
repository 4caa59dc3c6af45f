"""Per-template counts and numbers of this process's log records, sent with the heartbeat.

The handler only queues (level, message, time) in a bounded deque; the probe thread drains it on
each heartbeat, masks numbers and hex into templates, and keeps per (level, template) the count
and each number slot's min/max/last, so aggregation never hides them. Every
`aggregation_interval` seconds the `logs` summary the heartbeat carries is renewed. Listeners
(the alert rules) see each drained batch.
"""

from __future__ import annotations

import collections
import contextlib
import os
import pickle
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from rankscope import level as _level
from rankscope.logs.analysis import template_of
from rankscope.logs.model import TemplateStat
from rankscope.runtime.probe import register_summary

__all__ = [
    "Drained",
    "LogSettings",
    "drain",
    "note",
    "on_records",
    "set_settings",
    "settings",
    "templates",
]

PENDING_MAX = 20_000
"""Records queued between two heartbeats; beyond it they are counted, not summarized (they are
still in the file)."""
TEMPLATES_MAX = 512
"""Templates kept per process; records of further templates count as `unsummarized`."""
SLOTS_MAX = 8
HEARTBEAT_SHARE_BYTES = 2048
"""The `logs` summary's share of the heartbeat budget all features share
(`protocol.SUMMARIES_BUDGET_BYTES`), packed: the templates that fit, errors and warnings
first, then the most frequent; `more_templates` counts those left out (still in the file)."""
SEVERITY = {"CRITICAL": 4, "ERROR": 3, "WARNING": 2, "INFO": 1}


@dataclass(frozen=True)
class LogSettings:
    aggregation_interval: float = 10.0
    alert_threshold: float = 0.9
    """Host memory used / total above this raises an alert (`DistributedLogger`)."""


@dataclass(frozen=True)
class Drained:
    """One record as the alert rules see it."""

    level: str
    message: str
    time: float
    template: str
    where: str = ""
    """The logging call's `file.py:line`."""


_settings = LogSettings()
_pending: collections.deque[tuple[str, str, float, str, int]] = collections.deque(
    maxlen=PENDING_MAX
)
_lock = threading.Lock()
_stats: dict[tuple[str, str], _Stat] = {}
_unsummarized = 0
_listeners: list[Callable[[list[Drained]], None]] = []
_last_summary: dict[str, Any] | None = None
_last_summary_at = 0.0


class _Stat:
    __slots__ = ("count", "first", "high", "last", "last_time", "low")

    def __init__(self, now: float) -> None:
        self.count, self.first, self.last_time = 0, now, now
        self.low: list[float] = []
        self.high: list[float] = []
        self.last: list[float] = []

    def add(self, numbers: tuple[str, ...], now: float) -> None:
        self.count += 1
        self.last_time = now
        values = [_number(n) for n in numbers[:SLOTS_MAX]]
        if len(values) != len(self.last):
            self.low, self.high = list(values), list(values)
        else:
            self.low = [min(a, b) for a, b in zip(self.low, values, strict=True)]
            self.high = [max(a, b) for a, b in zip(self.high, values, strict=True)]
        self.last = values


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")


def settings() -> LogSettings:
    return _settings


def set_settings(**changes: float) -> LogSettings:
    global _settings
    _settings = replace(_settings, **changes)
    return _settings


def note(level: str, message: str, when: float, path: str = "", line: int = 0) -> None:
    """Queue one record for the summary (the handler's call: an append, nothing more; the
    caller's file and line are formatted at the drain)."""
    global _unsummarized
    if len(_pending) == PENDING_MAX:
        _unsummarized += 1
    _pending.append((level, message, when, path, line))


def on_records(fn: Callable[[list[Drained]], None]) -> Callable[[list[Drained]], None]:
    """Call `fn(batch)` with every drained batch (on the probe thread)."""
    _listeners.append(fn)
    return fn


def drain() -> None:
    """Template the queued records into the per-template stats and tell the listeners."""
    global _unsummarized
    batch: list[Drained] = []
    with _lock:
        while _pending:
            lvl, message, when, path, line = _pending.popleft()
            where = f"{os.path.basename(path)}:{line}" if path else ""
            template, numbers = template_of(message)
            key = (lvl, template)
            stat = _stats.get(key)
            if stat is None:
                if len(_stats) >= TEMPLATES_MAX:
                    _unsummarized += 1
                    batch.append(Drained(lvl, message, when, template, where))
                    continue
                stat = _stats[key] = _Stat(when)
            stat.add(numbers, when)
            batch.append(Drained(lvl, message, when, template, where))
    if batch:
        for fn in list(_listeners):
            with contextlib.suppress(Exception):  # a broken rule must not stop the summary
                fn(batch)


def templates() -> list[TemplateStat]:
    """This process's templates so far, most frequent first."""
    with _lock:
        items = list(_stats.items())
    out = [
        TemplateStat(
            lvl, tpl, s.count, s.first, s.last_time, tuple(s.low), tuple(s.high), tuple(s.last)
        )
        for (lvl, tpl), s in items
    ]
    out.sort(key=lambda t: -t.count)
    return out


@register_summary("logs")
def _summary() -> dict[str, Any] | None:
    """Renewed every `aggregation_interval` seconds; None while nothing was logged."""
    global _last_summary, _last_summary_at
    drain()
    if not _level.RECORDING or not _stats:
        return _last_summary
    now = time.time()
    if _last_summary is None or now - _last_summary_at >= _settings.aggregation_interval:
        counts: dict[str, int] = collections.Counter()
        for (lvl, _tpl), s in list(_stats.items()):
            counts[lvl] += s.count
        _last_summary = within_share(
            {"time": now, "counts": dict(counts), "unsummarized": _unsummarized}, templates()
        )
        _last_summary_at = now
    return _last_summary


def within_share(
    head: dict[str, Any], stats: list[TemplateStat], share: int = HEARTBEAT_SHARE_BYTES
) -> dict[str, Any]:
    """`head` with the templates that fit in `share` bytes packed (errors and warnings first,
    then the most frequent) and how many were left out."""
    order = sorted(stats, key=lambda t: (-SEVERITY.get(t.level, 0), -t.count))
    summary = {**head, "templates": [], "more_templates": 0}
    kept: list[dict[str, Any]] = summary["templates"]
    for stat in order[:64]:  # a template that does not fit is skipped; a smaller one may
        kept.append(asdict(stat))
        if len(pickle.dumps(summary, protocol=pickle.HIGHEST_PROTOCOL)) > share:
            kept.pop()
    summary["more_templates"] = len(stats) - len(kept)
    return summary
