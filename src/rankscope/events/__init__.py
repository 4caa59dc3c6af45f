"""What the ranks reported: consistency checks, hang reports, debug sessions, OOM verdicts."""

from rankscope.events.collect import job_events

__all__ = ["job_events"]
