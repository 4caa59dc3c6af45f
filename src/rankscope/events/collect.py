"""Every feature's events, read back through the hub (the run directory lives on its node)."""

from __future__ import annotations

from typing import Any

from rankscope.runtime.client import HubClient

__all__ = ["job_events"]


def job_events(
    address: str | None, job: str | None, kinds: list[str] | None, limit: int
) -> dict[str, list[dict[str, Any]]]:
    """The newest `limit` events of every selected job, each with `who` sent it."""
    client = HubClient.attach(address)
    results = {}
    for job_id, probes in client.jobs(job).items():
        labels = {p.info.probe_id: p.context.label for p in probes}
        events = client.events(job_id, kinds, limit)
        results[job_id] = [{**e, "who": labels.get(e.get("probe_id", ""), "?")} for e in events]
    return results
