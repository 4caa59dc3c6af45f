"""What `rankscope events` reports: each job's newest events, as the run directory keeps them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rankscope.serialize import plain

__all__ = ["EventsReport", "JobEvents"]


@dataclass(frozen=True)
class JobEvents:
    """One job's newest events, oldest first, each a JSONL record with `who` sent it."""

    job_id: str
    events: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class EventsReport:
    """`rankscope events`: every selected job's events; its JSON is `{job_id: [event, ...]}`."""

    jobs: tuple[JobEvents, ...]

    def json_data(self) -> dict[str, Any]:
        return {j.job_id: plain(list(j.events)) for j in self.jobs}
