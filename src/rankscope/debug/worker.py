"""This process's open debug sessions, answered to the hub by the probe (`debug_sessions`).

The registry lives in the paused process itself: a process that dies takes its sessions with
it, so listings never show a session nobody can attach to. Opening and closing are also
written as events to the run directory, which is how `diagnose --check-debug-ports` learns
about sessions whose process died.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any

from rankscope.debug.model import DebugSession
from rankscope.runtime.probe import register_handler

log = logging.getLogger("rankscope")

_lock = threading.Lock()
_sessions: dict[str, DebugSession] = {}


def add(session: DebugSession) -> None:
    with _lock:
        _sessions[session.id] = session
    _emit(
        "debug_session_opened",
        {
            "id": session.id,
            "rank": session.rank,
            "pid": session.pid,
            "hostname": session.hostname,
            "node_ip": session.node_ip,
            "location": f"{session.location} {session.function}",
            "reason": session.reason,
            "backend": session.backend,
            "port": session.port,
        },
    )


def update(session_id: str, **changes: Any) -> None:
    with _lock:
        session = _sessions.get(session_id)
        if session is not None:
            _sessions[session_id] = dataclasses.replace(session, **changes)


def note_refused(session_id: str) -> None:
    with _lock:
        session = _sessions.get(session_id)
        if session is not None:
            _sessions[session_id] = dataclasses.replace(session, refused=session.refused + 1)


def remove(session_id: str, outcome: str) -> None:
    with _lock:
        session = _sessions.pop(session_id, None)
    if session is not None:
        _emit("debug_session_closed", {"id": session_id, "outcome": outcome})


def get(session_id: str) -> DebugSession | None:
    with _lock:
        return _sessions.get(session_id)


def open_sessions() -> list[DebugSession]:
    with _lock:
        return list(_sessions.values())


@register_handler("debug_sessions")
def _debug_sessions(args: dict[str, Any]) -> list[DebugSession]:
    """The open sessions; tokens only for `debug attach` (args `with_token`)."""
    with_token = bool(args.get("with_token"))
    return [s if with_token else s.public() for s in open_sessions()]


def _emit(kind: str, payload: dict[str, Any]) -> None:
    try:
        from rankscope.runtime.api import current_probe

        probe = current_probe()
        if probe is not None:
            probe.emit(kind, payload)
    except Exception as exc:  # the run directory is a record, never a reason to fail
        log.debug("rankscope: event %s not recorded: %s", kind, exc)
