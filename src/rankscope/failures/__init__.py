"""Exceptions that end a rank's work: caught where they arise (Ray's task-failure path, Ray
Train's training thread, a dying thread), sent to the hub at once as `task_error` events and
`exception` alerts. No command of its own: `rankscope events --kind task_error` lists them."""

from rankscope.failures import worker as _worker  # noqa: F401  (installs at every probe's start)
from rankscope.failures.analysis import TraceFrame, is_library_path, user_frame
from rankscope.failures.model import EVENT_KIND, TaskError

__all__ = ["EVENT_KIND", "TaskError", "TraceFrame", "is_library_path", "user_frame"]
