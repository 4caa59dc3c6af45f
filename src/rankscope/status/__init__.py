"""Who is there: every registered process of a job, its state, and why the dead ones died."""

from rankscope.status.collect import JobStatus, any_lost, job_statuses

__all__ = ["JobStatus", "any_lost", "job_statuses"]
