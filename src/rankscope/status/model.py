"""What `rankscope status` reports: each job's processes, why the dead died, and its alerts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rankscope.alerts.model import Alert
from rankscope.runtime.protocol import ProbeStatus
from rankscope.serialize import by_job

__all__ = ["JobStatus", "JobStatusView", "StatusReport"]


@dataclass(frozen=True)
class JobStatus:
    """One job's processes as the hub sees them, and why the dead ones died (by probe id)."""

    job_id: str
    processes: tuple[ProbeStatus, ...]
    deaths: dict[str, str]
    first_death: str = ""
    """When several ranks died: which died first and how the others followed."""
    died_at: dict[str, float] = field(default_factory=dict)
    """When Ray saw each dead process end (by probe id), where Ray knows it."""


@dataclass(frozen=True)
class JobStatusView:
    """One job as `rankscope status` shows it."""

    job_id: str
    processes: tuple[ProbeStatus, ...]
    deaths: dict[str, str]
    """Why each dead process died, by probe id."""
    first_death: str
    alerts: tuple[str, ...]
    """The monitor's alert lines, from the heartbeats."""
    active_alerts: tuple[Alert, ...]
    """The ranks' active alerts (`rankscope alerts`), from the run directory's events."""
    unsaid_alerts: tuple[str, ...] = field(default=(), metadata={"json": False})
    """The monitor's lines that `active_alerts` do not already say: what the text shows."""


@dataclass(frozen=True)
class StatusReport:
    """`rankscope status`: every selected job; its JSON is keyed by job id."""

    jobs: tuple[JobStatusView, ...]

    def json_data(self) -> dict[str, Any]:
        return by_job(self.jobs)
