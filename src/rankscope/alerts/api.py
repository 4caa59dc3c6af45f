"""The alerts feature's public Python API: which log lines raise an alert, and where alerts go.

Both change this process's rule state, which the worker side (`worker.py`) evaluates on the
probe thread.
"""

from __future__ import annotations

import dataclasses

from rankscope.alerts.model import SEVERITIES, AlertSettings, RegexRule
from rankscope.alerts.worker import rules_state

__all__ = ["alert_on", "configure_alerts"]


def configure_alerts(
    *,
    webhook: str | None = None,
    error_burst: int | None = None,
    error_window_s: float | None = None,
    error_burst_scope: str | None = None,
) -> AlertSettings:
    """Where alerts go and when ERRORs make a burst, for this process; `error_burst_scope="job"`
    counts every rank's ERRORs together (set it on every rank: the job's judge reads its own).

    Example: `rankscope.configure_alerts(webhook="https://hooks.example/T0/B0")`.
    """
    if webhook and not webhook.startswith(("http://", "https://")):
        raise ValueError(f"webhook {webhook!r} must be an http:// or https:// URL")
    rules = rules_state()
    changes = {
        k: v
        for k, v in (
            ("webhook", webhook),
            ("error_burst", error_burst),
            ("error_window_s", error_window_s),
            ("error_burst_scope", error_burst_scope),
        )
        if v is not None
    }
    rules.settings = dataclasses.replace(rules.settings, **changes)  # type: ignore[arg-type]
    return rules.settings


def alert_on(
    pattern: str,
    *,
    severity: str = "warning",
    count: int = 1,
    window_s: float = 60.0,
    name: str | None = None,
    scope: str = "rank",
) -> RegexRule:
    """Raise an alert when `count` log lines match `pattern` within `window_s` seconds: on one
    rank (`scope="rank"`), or across all ranks together (`scope="job"`, judged by one rank
    through the hub; the alert names the ranks that contributed). A job-scoped rule counts the
    lines of the processes that set it: call it on every rank (or actor) whose lines count. The
    judge is the lowest live rank with job-scoped rules (without ranks: the lowest probe id).

    Example: `rankscope.alert_on(r"CUDA out of memory", severity="critical")`.
    Lines of every logger rankscope captures count (`DistributedLogger`, `capture_logging`).
    """
    if severity not in SEVERITIES:
        raise ValueError(f"severity {severity!r} is not one of {', '.join(SEVERITIES)}")
    rule = RegexRule(name or pattern, pattern, severity, count, window_s, scope)
    rules = rules_state()
    kept = [r for r in rules.settings.rules if r.name != rule.name]
    rules.set_rules([*kept, rule])
    return rule
