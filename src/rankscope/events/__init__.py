"""What the ranks reported: consistency checks, hang reports, debug sessions, OOM verdicts."""

from rankscope.events.collect import job_events
from rankscope.events.model import EventsReport, JobEvents

__all__ = ["EventsReport", "JobEvents", "job_events"]
