"""Events as a table: time, who, kind, and what the event says in a line or a few."""

from __future__ import annotations

import json
import time
from typing import Any

from rich.table import Table
from rich.text import Text

__all__ = ["describe_event", "render_events", "summarize_payload"]

SUMMARY_WIDTH = 160


def render_events(job_id: str, events: list[dict[str, Any]]) -> Table:
    table = Table(title=f"job {job_id}: last {len(events)} events", title_justify="left")
    for column in ("time", "who", "kind", "what"):
        table.add_column(column, overflow="fold")
    for e in events:
        kind = str(e.get("kind", ""))
        table.add_row(
            time.strftime("%H:%M:%S", time.localtime(float(e.get("time", 0)))),
            e["who"],
            kind,
            Text(describe_event(kind, e.get("payload", {}))),  # never read as markup
        )
    return table


def describe_event(kind: str, payload: Any) -> str:
    """What one event says: a hang report's findings, else the payload's own one-liner."""
    if kind == "hang_report" and isinstance(payload, dict):
        return _hang_report(payload)
    return summarize_payload(payload)


def _hang_report(payload: dict[str, Any]) -> str:
    """The report's findings (who never came, who failed, who died first), one per line.

    The rank that wrote the report is only the one whose watchdog fired first; its reason
    (`all_reduce #3 ... has run for 300 s`) follows the findings, with the report's path.
    """
    findings = [f for f in payload.get("findings") or () if isinstance(f, str) and f]
    reason = payload.get("reason")
    path = payload.get("path")
    trigger = f"this rank's watchdog: {reason}" if isinstance(reason, str) and reason else ""
    where = f"report: {path}" if isinstance(path, str) and path else ""
    if not findings:
        lines = [f"no culprit found; {trigger}" if trigger else "no culprit found"]
        return "\n".join([*lines, where] if where else lines)
    context = "; ".join(part for part in (trigger, where) if part)
    return "\n".join([*findings, f"({context})"] if context else findings)


def summarize_payload(payload: Any) -> str:
    """The event's own one-liner when it has one (`summary`, `reason`), else compact JSON."""
    if isinstance(payload, dict):
        for key in ("summary", "reason", "message"):
            if isinstance(payload.get(key), str):
                return payload[key]
    text = json.dumps(payload, default=str, separators=(",", ":"))
    return text if len(text) <= SUMMARY_WIDTH else text[: SUMMARY_WIDTH - 3] + "..."
