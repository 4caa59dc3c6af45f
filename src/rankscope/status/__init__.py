"""Who is there: every registered process of a job, its state, and why the dead ones died."""

from rankscope.status.collect import any_lost, job_statuses, status_report
from rankscope.status.model import JobStatus, JobStatusView, StatusReport

__all__ = [
    "JobStatus",
    "JobStatusView",
    "StatusReport",
    "any_lost",
    "job_statuses",
    "status_report",
]
