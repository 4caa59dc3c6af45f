"""Pure functions over an exception's frames: the user's frame, bounded text, the record, and
how often a process may send one. No Ray, no I/O; the worker side (`worker.py`) feeds them."""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from rankscope.failures.model import TaskError

__all__ = [
    "LIBRARY_SEGMENTS",
    "MESSAGE_LIMIT",
    "NOT_ERRORS",
    "TRACEBACK_LIMIT",
    "RateLimit",
    "TraceFrame",
    "alert_message",
    "bounded",
    "entry_frame",
    "is_library_path",
    "raised_in_collective",
    "tail",
    "task_error",
    "user_frame",
    "worth_recording",
]

MESSAGE_LIMIT = 500
"""Characters of `str(exc)` kept."""
TRACEBACK_LIMIT = 4096
"""Characters of the formatted traceback kept, its last lines."""
LIBRARY_SEGMENTS = ("ray/", "torch/", "verl/single_controller/", "rankscope/")
"""Folders whose frames are never the user's wherever they are installed (a source checkout
of Ray or verl too); `python/ray/_raylet.pyx` is how Ray's Cython frames are named."""
COLLECTIVE_SEGMENTS = ("torch/distributed/",)
"""Where a collective raises (a peer gone, a timeout): an error that may be another rank's."""
USER_SEGMENTS = ("rankscope/demo/",)
"""rankscope's own folders holding user code: the demo's training script."""
NOT_ERRORS = frozenset(
    ("KeyboardInterrupt", "SystemExit", "GeneratorExit", "TaskCancelledError", "AsyncioActorExit")
)
"""Ways a task ends that are asked for (a cancel, `exit_actor()`), not errors of the rank."""


@dataclass(frozen=True)
class TraceFrame:
    """One frame of a traceback, outermost first as Python lists them."""

    path: str
    line: int
    function: str

    @property
    def where(self) -> str:
        return f"{os.path.basename(self.path)}:{self.line}"


def _has_segment(path: str, segments: Sequence[str]) -> bool:
    slashed = "/" + path.replace(os.sep, "/")
    return any(f"/{segment}" in slashed for segment in segments)


def is_library_path(path: str, roots: Sequence[str], user_roots: Sequence[str] = ()) -> bool:
    """Not the user's code: under one of `roots` (the standard library, site-packages), in
    one of `LIBRARY_SEGMENTS`, or Python's own (`<frozen ...>`); `user_roots` and
    `USER_SEGMENTS` win over both. `<string>` and other made-up names count as the user's.
    Example: `is_library_path("/venv/lib/python3.11/site-packages/ray/worker.py", roots)`."""
    if path.startswith("<"):
        return path.startswith("<frozen")
    if _has_segment(path, USER_SEGMENTS) or any(_under(path, root) for root in user_roots):
        return False
    return any(_under(path, root) for root in roots) or _has_segment(path, LIBRARY_SEGMENTS)


def _under(path: str, root: str) -> bool:
    root = root.rstrip("/")
    return bool(root) and (path == root or path.startswith(root + "/"))


def user_frame(
    frames: Sequence[TraceFrame], roots: Sequence[str], user_roots: Sequence[str] = ()
) -> TraceFrame | None:
    """The innermost frame of the user's code; the innermost frame of all when none is the
    user's (an error inside Ray itself); None without frames."""
    for frame in reversed(frames):
        if not is_library_path(frame.path, roots, user_roots):
            return frame
    return frames[-1] if frames else None


def raised_in_collective(
    frames: Sequence[TraceFrame], roots: Sequence[str], user_roots: Sequence[str] = ()
) -> bool:
    """Whether the exception came out of torch.distributed below the user's innermost frame:
    the rank's collective failed (a peer died or timed out), often the effect of another rank."""
    for i in range(len(frames) - 1, -1, -1):
        if not is_library_path(frames[i].path, roots, user_roots):
            return any(_has_segment(f.path, COLLECTIVE_SEGMENTS) for f in frames[i + 1 :])
    return False


def entry_frame(
    frames: Sequence[TraceFrame], roots: Sequence[str], user_roots: Sequence[str] = ()
) -> TraceFrame | None:
    """The outermost frame of the user's code: the function a runner was given (Ray Train's
    `train_loop_per_worker`, a thread's target); None when no frame is the user's."""
    for frame in frames:
        if not is_library_path(frame.path, roots, user_roots):
            return frame
    return None


def bounded(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """`text` cut to at most `limit` characters, saying how many were left out."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - 24)  # room for " ... (+N chars)"
    return text[:keep] + f" ... (+{len(text) - keep} chars)"


def tail(text: str, limit: int = TRACEBACK_LIMIT) -> str:
    """The last lines of `text` within `limit` characters (the raising frame is at the end)."""
    if len(text) <= limit:
        return text
    cut = text[len(text) - limit + 4 :]
    newline = cut.find("\n")
    return "...\n" + (cut[newline + 1 :] if 0 <= newline < len(cut) - 1 else cut)


def worth_recording(exc_type: str) -> bool:
    """Whether an exception of this type name is an error of the rank (`NOT_ERRORS` are not)."""
    return exc_type not in NOT_ERRORS


def task_error(
    *,
    exc_type: str,
    message: str,
    frames: Sequence[TraceFrame],
    traceback_text: str,
    roots: Sequence[str],
    user_roots: Sequence[str] = (),
    rank: int | None,
    group: str | None,
    pid: int,
    hostname: str,
    actor: str | None,
    task: str | None,
    thread: str,
    time: float,
    via: str,
    echo: bool = False,
) -> TaskError:
    """The record of one exception, its text bounded and its user frame picked. Without a
    `task` name (a runner's thread), the user's entry function names it, else the thread."""
    frame = user_frame(frames, roots, user_roots)
    if not task:
        entry = entry_frame(frames, roots, user_roots)
        task = entry.function if entry else thread
    return TaskError(
        rank=rank,
        group=group,
        pid=pid,
        hostname=hostname,
        actor=actor,
        task=task,
        thread=thread,
        exc_type=exc_type,
        message=bounded(message),
        where=frame.where if frame else "",
        function=frame.function if frame else "",
        path=frame.path if frame else "",
        traceback=tail(traceback_text),
        time=time,
        via=via,
        echo=echo,
        in_collective=raised_in_collective(frames, roots, user_roots),
    )


def alert_message(error: TaskError) -> str:
    """The alert's one line, as the headline with the message on one line and at most 200
    characters of it, so the place stays in view."""
    message = bounded(" ".join(error.message.split()), 200)
    said = f"{error.exc_type}: {message}" if message else error.exc_type
    at = f" ({error.where})" if error.where else ""
    return f"{error.who} raised {said}{at}"


class RateLimit:
    """One record per key (exception type, where) per `window_s`, at most `max_keys` keys
    remembered (the oldest forgotten first). Not thread-safe: the caller holds a lock."""

    def __init__(self, window_s: float = 5.0, max_keys: int = 64) -> None:
        self.window_s = window_s
        self.max_keys = max_keys
        self.suppressed = 0
        """Records refused so far."""
        self._last: OrderedDict[tuple[str, str], float] = OrderedDict()

    def allow(self, key: tuple[str, str], now: float) -> bool:
        """Whether a record for `key` may go at `now`; remembers it when it may."""
        last = self._last.get(key)
        if last is not None and now - last < self.window_s:
            self.suppressed += 1
            return False
        self._last[key] = now
        self._last.move_to_end(key)
        while len(self._last) > self.max_keys:
            self._last.popitem(last=False)
        return True
