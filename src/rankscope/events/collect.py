"""Every feature's events, read back through the hub (the run directory lives on its node)."""

from __future__ import annotations

from rankscope.events.model import EventsReport, JobEvents
from rankscope.runtime.ask import Selection, select
from rankscope.runtime.client import HubClient

__all__ = ["job_events"]


def job_events(
    address: str | None, selection: Selection, *, kinds: list[str] | None, limit: int
) -> EventsReport:
    """The newest `limit` events of every selected job, each with `who` sent it."""
    client = HubClient.attach(address)
    jobs = []
    for job_id, probes in select(client, selection).items():
        labels = {p.info.probe_id: p.context.label for p in probes}
        events = client.events(job_id, kinds, limit)
        found = tuple({**e, "who": labels.get(e.get("probe_id", ""), "?")} for e in events)
        jobs.append(JobEvents(job_id, found))
    return EventsReport(tuple(jobs))
