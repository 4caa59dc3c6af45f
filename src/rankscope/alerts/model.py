"""Alerts and the rules that raise them: records that reach the run directory, the webhook and
`rankscope alerts`."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from rankscope.errors import UserError

__all__ = ["SCOPES", "SEVERITIES", "Alert", "AlertSettings", "JobAlerts", "RegexRule"]

SEVERITIES = ("info", "warning", "error", "critical")
SCOPES = ("rank", "job")
"""Where a count rule counts: one rank's records (each rank raises its own) or the job's
(every rank's records together, judged by one rank through the hub: `alerts.worker_judge`)."""


def _check_scope(scope: str, what: str) -> None:
    if scope not in SCOPES:
        raise UserError(f"{what} scope {scope!r} is not one of {', '.join(SCOPES)}")


@dataclass(frozen=True)
class Alert:
    """One alert: which rule, how bad, what in one line, on which rank, and whether it holds."""

    rule: str
    severity: str
    message: str
    """One line that names the rank(s), e.g. `rank 1: 12 ERROR records in 60 s`."""
    time: float
    """When it was raised (its last repetition)."""
    rank: int | None = None
    pid: int = 0
    group: str | None = None
    count: int = 1
    """How many times the rule fired in this alert (repeats within the cooldown are counted)."""
    active: bool = True
    job_id: str = ""
    scope: str = "rank"
    """`job`: about the job's ranks together (`rank` None), not about the process raising it."""
    acked: bool = False
    """Acknowledged (`rankscope alerts --ack RULE|all`) after it was raised: not active."""


@dataclass(frozen=True)
class RegexRule:
    """A user rule: `count` records matching `pattern` within `window_s` seconds.

    Example: `RegexRule("oom", r"CUDA out of memory", severity="critical")`.
    """

    name: str
    pattern: str
    severity: str = "warning"
    count: int = 1
    window_s: float = 60.0
    scope: str = "rank"
    """`job`: `count` matching lines within `window_s` across all ranks together."""

    def __post_init__(self) -> None:
        import re

        _check_scope(self.scope, f"alert rule {self.name!r}:")
        if self.severity not in SEVERITIES:
            raise UserError(f"severity {self.severity!r} is not one of {', '.join(SEVERITIES)}")
        if self.count < 1 or self.window_s <= 0:
            raise UserError(f"alert rule {self.name!r}: count must be >= 1 and window > 0 s")
        try:
            re.compile(self.pattern)
        except re.error as exc:
            raise UserError(f"alert rule pattern {self.pattern!r} is not a regex: {exc}") from None


@dataclass(frozen=True)
class AlertSettings:
    """The alert rules' thresholds; RANKSCOPE_ALERT_* variables overlay the defaults.

    Memory thresholds are the memory feature's (`MemoryThresholds`: host 0.9, device 0.85);
    a `DistributedLogger(alert_threshold=...)` replaces the host one in its process.
    """

    webhook: str = ""
    """URL the alerts are POSTed to as JSON (RANKSCOPE_ALERT_WEBHOOK); empty: none."""
    error_burst: int = 10
    """ERROR (or worse) records within `error_window_s` that make a burst."""
    error_window_s: float = 60.0
    error_burst_scope: str = "rank"
    """`job`: `error_burst` ERROR records within `error_window_s` across all ranks together."""
    cooldown_s: float = 60.0
    """A rule that keeps firing on a rank is raised again at most this often (counted between)."""
    active_for_s: float = 300.0
    """An alert counts as active this long after it was last raised (memory: until resolved)."""
    silent_after_s: float = 120.0
    """A rank with no step and no log this long, while its group's others continue, is silent."""
    check_interval_s: float = 2.0
    rules: tuple[RegexRule, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        _check_scope(self.error_burst_scope, "error burst")

    @classmethod
    def from_env(cls) -> AlertSettings:
        values: dict[str, object] = {}
        for name, kind in (
            ("webhook", str),
            ("error_burst", int),
            ("error_window_s", float),
            ("error_burst_scope", str),
            ("cooldown_s", float),
            ("active_for_s", float),
            ("silent_after_s", float),
        ):
            raw = os.environ.get(f"RANKSCOPE_ALERT_{name.upper()}")
            if raw is None:
                continue
            try:
                values[name] = kind(raw)
            except ValueError:
                raise UserError(
                    f"RANKSCOPE_ALERT_{name.upper()}={raw!r} is not a valid {kind.__name__}"
                ) from None
        return cls(**values)  # type: ignore[arg-type]


@dataclass(frozen=True)
class JobAlerts:
    job_id: str
    alerts: tuple[Alert, ...]
    """Newest first."""

    @property
    def active(self) -> int:
        return sum(a.active for a in self.alerts)
