"""The record of an exception that ended a rank's work: a `task_error` event's payload."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["EVENT_KIND", "VIAS", "TaskError"]

EVENT_KIND = "task_error"
"""The event kind in the run directory: `rankscope events --kind task_error`."""
VIAS = ("ray_task", "ray_train", "thread")
"""Where the exception was caught: Ray's task-failure path (a task or actor method, sync,
threaded or async), Ray Train's training-thread runner, or a thread that died of it."""


@dataclass(frozen=True)
class TaskError:
    """One exception that ended a task, a train loop or a thread, as it raised.

    Example headline: `rank 3 raised ValueError: bad batch (train.py:92)`.
    """

    rank: int | None
    group: str | None
    pid: int
    hostname: str
    actor: str | None
    """The Ray actor's class, when the process is an actor."""
    task: str
    """Ray's task or method name, else the thread's name (Ray Train's `TrainingThread(...)`)."""
    thread: str
    exc_type: str
    message: str
    """`str(exc)`, bounded; for an error passed on from another task, that task's message."""
    where: str
    """The user's innermost frame as `file.py:LINE` (the innermost frame of all when no frame
    is the user's; empty without a traceback)."""
    function: str
    path: str
    """The full path of `where`'s file."""
    traceback: str
    """The formatted traceback's last lines, bounded."""
    time: float
    via: str
    """One of `VIAS`."""
    echo: bool = False
    """Another task's error passed on (Ray's RayTaskError, e.g. a controller's `ray.get` of a
    failed worker): the record of the task that raised first names the cause."""
    in_collective: bool = False
    """Raised by torch.distributed under the user's frame: the rank's collective failed (a
    peer died, a timeout), often the effect of another rank's fault, not its cause."""

    @property
    def who(self) -> str:
        """`rank 3`, or `pid 1234@host` for a process without a rank."""
        return f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}@{self.hostname}"

    @property
    def headline(self) -> str:
        """One line: `rank 3 raised ValueError: bad batch (train.py:92)`."""
        said = f"{self.exc_type}: {self.message}" if self.message else self.exc_type
        at = f" ({self.where})" if self.where else ""
        return f"{self.who} raised {said}{at}"

    def to_payload(self) -> dict[str, Any]:
        """The event's payload: every field as plain JSON, and `summary`, the headline
        (`rankscope events` shows it as the event's line)."""
        return {**dataclasses.asdict(self), "summary": self.headline}

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> TaskError:
        """Back from an event's payload; fields it lacks take empty values (older probes)."""
        empty: dict[str, Any] = {
            "rank": None, "group": None, "pid": 0, "hostname": "", "actor": None, "task": "",
            "thread": "", "exc_type": "", "message": "", "where": "", "function": "", "path": "",
            "traceback": "", "time": 0.0, "via": "", "echo": False, "in_collective": False,
        }  # fmt: skip
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{**empty, **{k: v for k, v in payload.items() if k in names}})
