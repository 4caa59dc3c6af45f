"""backend="debugpy": the same registry and host rules, for an IDE (VS Code) instead of pdb.

debugpy listens once per process; the port is kept for later sessions of the same process.
debugpy has no token of its own, so the loopback default matters more here; `debug list`
prints a launch.json "attach" configuration and `debug attach` forwards a local port.
"""

from __future__ import annotations

import logging
import threading
import time
from types import FrameType
from typing import Any

from rankscope.debug import worker

log = logging.getLogger("rankscope")

POLL_S = 0.1
_endpoint: tuple[str, int] | None = None
_lock = threading.Lock()


def _listen(host: str) -> int:
    global _endpoint
    import debugpy

    with _lock:
        if _endpoint is None:
            bound = debugpy.listen((host, 0))
            _endpoint = (str(bound[0]), int(bound[1]))
        return _endpoint[1]


def debugpy_breakpoint(
    frame: FrameType, *, name: str | None, timeout: float | None, sync: bool
) -> None:
    """Wait for an IDE to attach (or the timeout), then stop at `frame`'s next line."""
    try:
        import debugpy
    except ImportError:
        log.warning("rankscope: backend='debugpy' needs `pip install debugpy`; breakpoint skipped")
        return
    from rankscope.debug.worker_server import open_session, timed_out

    try:
        session = open_session(
            frame,
            reason="breakpoint",
            name=name,
            backend="debugpy",
            timeout=timeout,
            sync_ranks=sync,
            port_for=_listen,
        )
        deadline = None if timeout is None else time.time() + timeout
        while not debugpy.is_client_connected():
            if deadline is not None and time.time() >= deadline:
                timed_out(session)
                return
            time.sleep(POLL_S)
        worker.update(session.id, state="attached")
        threading.Thread(
            target=_close_on_detach, args=(session,), name="rankscope-debugpy-watch", daemon=True
        ).start()
        settrace: Any = _settrace()
    except Exception as exc:
        log.warning("rankscope: debugpy breakpoint skipped: %s: %s", type(exc).__name__, exc)
        return
    if settrace is None:
        debugpy.breakpoint()
    else:
        settrace(
            suspend=True,
            trace_only_current_thread=True,
            patch_multiprocessing=False,
            stop_at_frame=frame,
        )


def _settrace() -> Any:
    """debugpy's own entry that stops at a given frame (the user's, not ours), if present."""
    try:
        from debugpy.server import api

        return getattr(api, "_settrace", None)
    except Exception:
        return None


def _close_on_detach(session: Any) -> None:
    import debugpy

    while debugpy.is_client_connected():
        time.sleep(0.5)
    session.close("detached")
