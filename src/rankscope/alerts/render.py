"""`rankscope alerts` as a table, newest first."""

from __future__ import annotations

import time

from rich.table import Table
from rich.text import Text

from rankscope.alerts.model import JobAlerts

__all__ = ["render_alerts"]

_STYLES = {"critical": "bold red", "error": "red", "warning": "yellow"}


def render_alerts(result: JobAlerts) -> Table | Text:
    if not result.alerts:
        return Text(f"job {result.job_id}: no alerts")
    table = Table(
        title=f"job {result.job_id}: {result.active} active of {len(result.alerts)} alerts",
        title_justify="left",
    )
    for column in ("time", "state", "severity", "rule", "what", "times"):
        table.add_column(column, overflow="fold")
    for a in result.alerts:
        table.add_row(
            time.strftime("%H:%M:%S", time.localtime(a.time)),
            "active" if a.active else "acked" if a.acked else "ended",
            Text(a.severity, style=_STYLES.get(a.severity, "")),
            a.rule,
            Text(a.message),
            str(a.count),
        )
    return table
