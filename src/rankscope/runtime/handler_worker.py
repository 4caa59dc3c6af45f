"""The one worker thread a probe runs heavy command handlers on (`register_handler(kind,
off_thread=True)`, e.g. `memory`): one command at a time and none queued, so a slow handler
costs the process one thread's work, never a growing backlog, and never the probe's heartbeat.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable
from typing import Any

__all__ = ["Handler", "HandlerWorker"]

log = logging.getLogger("rankscope")

Handler = Callable[[dict[str, Any]], Any]


class _Job:
    """One heavy command on the worker thread; `done` is set when its handler returned."""

    def __init__(self, kind: str, fn: Handler, args: dict[str, Any]) -> None:
        self.kind, self.fn, self.args = kind, fn, args
        self.done = threading.Event()
        self.ok = False
        self.payload: Any = None
        self.error = ""

    def run(self) -> None:
        try:
            self.payload, self.ok = self.fn(self.args), True
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            log.debug("rankscope handler %s failed:\n%s", self.kind, traceback.format_exc())


class HandlerWorker:
    """The one thread that runs heavy handlers: one command at a time and none queued, so a
    slow handler costs the process one thread's work, never a growing backlog."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._current: _Job | None = None
        """The job started and not yet returned (it may run past its budget)."""
        self._next: _Job | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False

    def submit(self, kind: str, fn: Handler, args: dict[str, Any]) -> _Job | str:
        """Start `fn(args)`; when an earlier job still runs, the one-line reason it cannot."""
        with self._lock:
            if self._current is not None:
                return f"still busy with the previous {self._current.kind} request; try again"
            if self._stopped:
                return "the probe is stopping"
            job = self._current = self._next = _Job(kind, fn, args)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            self._wake.notify()
            return job

    @property
    def busy_with(self) -> str | None:
        """The kind of the job still running, if any."""
        with self._lock:
            return None if self._current is None else self._current.kind

    def stop(self) -> None:
        """Let the thread end once its job (if any) returns; a handler is never interrupted."""
        with self._lock:
            self._stopped = True
            self._wake.notify()

    def _loop(self) -> None:
        while True:
            with self._lock:
                while self._next is None and not self._stopped:
                    self._wake.wait()
                if self._next is None:
                    return
                job, self._next = self._next, None
            try:
                job.run()
            finally:  # free the slot before `done`: a command right after is not "busy"
                with self._lock:
                    self._current = None
                job.done.set()
