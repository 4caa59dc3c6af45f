"""Events as a table: time, who, kind, and the event's own one-liner."""

from __future__ import annotations

import json
import time
from typing import Any

from rich.table import Table

__all__ = ["render_events", "summarize_payload"]

SUMMARY_WIDTH = 160


def render_events(job_id: str, events: list[dict[str, Any]]) -> Table:
    table = Table(title=f"job {job_id}: last {len(events)} events", title_justify="left")
    for column in ("time", "who", "kind", "what"):
        table.add_column(column, overflow="fold")
    for e in events:
        table.add_row(
            time.strftime("%H:%M:%S", time.localtime(float(e.get("time", 0)))),
            e["who"],
            str(e.get("kind", "")),
            summarize_payload(e.get("payload", {})),
        )
    return table


def summarize_payload(payload: Any) -> str:
    """The event's own one-liner when it has one (`summary`, `reason`), else compact JSON."""
    if isinstance(payload, dict):
        for key in ("summary", "reason", "message"):
            if isinstance(payload.get(key), str):
                return payload[key]
    text = json.dumps(payload, default=str, separators=(",", ":"))
    return text if len(text) <= SUMMARY_WIDTH else text[: SUMMARY_WIDTH - 3] + "..."
