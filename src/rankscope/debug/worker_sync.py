"""`sync=True`: the other ranks of a job wait at their next rankscope call while one is paused.

The paused process fans a `debug_pause` command out to every probe of its job through the hub;
each probe flips a module-level flag that `rankscope.step()` (and `conditional_breakpoint`)
checks, so a rank with no pending pause pays one global lookup. A waiting rank resumes on
`debug_resume`, or on its own as soon as the session is gone (closed, or its process died),
or when the hub cannot be asked: rankscope never leaves a job waiting on something it cannot see.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from rankscope.runtime import deadlines
from rankscope.runtime.probe import register_handler, register_step_hook

log = logging.getLogger("rankscope")

RECHECK_S = 2.0
"""How often a waiting rank asks whether the pausing session still exists."""
MAX_FAILED_CHECKS = 3
"""A waiting rank that cannot reach the hub this many times in a row resumes on its own."""


@dataclass(frozen=True)
class Pause:
    session_id: str
    probe_id: str
    """The paused process's probe, asked whether the session is still open."""
    label: str
    location: str


_paused = False
_pauses: dict[str, Pause] = {}
_lock = threading.Lock()
_wake = threading.Event()


@register_step_hook
def wait_if_paused() -> None:
    """Called by `rankscope.step()`: returns at once unless another rank holds a sync session."""
    if not _paused:
        return
    _wait()


def _wait() -> None:
    try:
        with _lock:
            holders = ", ".join(
                f"{p.label} at {p.location} (session {p.session_id})" for p in _pauses.values()
            )
        if not holders:
            return
        log.warning("rankscope: pid %d waits while %s is paused (sync=True)", os.getpid(), holders)
        started = time.time()
        next_check, failures = time.time() + RECHECK_S, 0
        while _paused:
            _wake.wait(0.2)
            _wake.clear()
            if time.time() >= next_check:
                failures = 0 if _drop_gone_sessions() else failures + 1
                if failures >= MAX_FAILED_CHECKS:
                    log.warning(
                        "rankscope: cannot reach the hub to follow the debug session; resuming"
                    )
                    _clear()
                next_check = time.time() + RECHECK_S
        log.warning("rankscope: pid %d resumes after %.1fs", os.getpid(), time.time() - started)
    except Exception as exc:  # never keep a rank waiting because of our own failure
        log.warning("rankscope: sync wait ended: %s: %s", type(exc).__name__, exc)
        _clear()


def _drop_gone_sessions() -> bool:
    """Forget pauses whose session closed or whose process died; False if the hub did not answer."""
    import ray

    from rankscope.runtime.hub import find_hub

    with _lock:
        pauses = list(_pauses.values())
    hub = find_hub()
    if hub is None:
        return False
    probe_ids = list({p.probe_id for p in pauses})
    result = ray.get(
        hub.fan_out.remote(
            "debug_sessions", {}, probe_ids=probe_ids, deadline_s=deadlines.DEBUG_SESSIONS_S
        ),
        timeout=deadlines.DEBUG_SESSIONS_S + 10.0,
    )
    still_open = {s.id for reply in result.replies if reply.ok for s in reply.payload}
    unanswered = {p.info.probe_id for p in result.missing}
    for pause in pauses:
        if pause.session_id not in still_open and pause.probe_id not in unanswered:
            _release(pause.session_id)
    return True


def _release(session_id: str) -> None:
    global _paused
    with _lock:
        _pauses.pop(session_id, None)
        _paused = bool(_pauses)
    _wake.set()


def _clear() -> None:
    global _paused
    with _lock:
        _pauses.clear()
        _paused = False
    _wake.set()


@register_handler("debug_pause")
def _debug_pause(args: dict[str, Any]) -> str:
    global _paused
    from rankscope.debug import worker

    if worker.get(args["session_id"]) is not None:
        return "holder"
    pause = Pause(args["session_id"], args["probe_id"], args["label"], args["location"])
    with _lock:
        _pauses[pause.session_id] = pause
        _paused = True
    return "pausing"


@register_handler("debug_resume")
def _debug_resume(args: dict[str, Any]) -> str:
    _release(args["session_id"])
    return "resumed"


def announce(kind: str, args: dict[str, Any], job_id: str) -> None:
    """Fan `debug_pause` / `debug_resume` out to the job's probes without waiting for them."""
    try:
        from rankscope.runtime.hub import find_hub

        hub = find_hub()
        if hub is not None:
            hub.fan_out.remote(kind, args, job_id=job_id, deadline_s=deadlines.DEBUG_SESSIONS_S)
    except Exception as exc:
        log.warning("rankscope: could not tell the other ranks (%s): %s", kind, exc)
