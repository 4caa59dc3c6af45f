"""`rankscope events`: what the job's processes reported to the run directory.

Consistency reports, watchdog hang reports, debug sessions opened and closed, OOM verdicts:
every feature's events, read back through the hub (the run directory lives on its node).
"""

from __future__ import annotations

import json
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from rankscope.cli.render import to_json
from rankscope.runtime.client import HubClient

SUMMARY_WIDTH = 160


def show_events(
    address: str | None,
    job: str | None,
    kinds: list[str] | None,
    limit: int,
    as_json: bool,
    console: Console,
) -> int:
    client = HubClient.attach(address)
    results = {}
    for job_id, probes in client.jobs(job).items():
        labels = {p.info.probe_id: p.context.label for p in probes}
        events = client.events(job_id, kinds, limit)
        results[job_id] = [{**e, "who": labels.get(e.get("probe_id", ""), "?")} for e in events]
    if as_json:
        console.print_json(to_json("events", results))
        return 0
    for job_id, events in results.items():
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
        console.print(table)
    return 0


def summarize_payload(payload: Any) -> str:
    """The event's own one-liner when it has one (`summary`, `reason`), else compact JSON."""
    if isinstance(payload, dict):
        for key in ("summary", "reason", "message"):
            if isinstance(payload.get(key), str):
                return payload[key]
    text = json.dumps(payload, default=str, separators=(",", ":"))
    return text if len(text) <= SUMMARY_WIDTH else text[: SUMMARY_WIDTH - 3] + "..."
