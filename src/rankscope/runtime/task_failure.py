"""One hook on Ray's task-failure path, shared by every feature that wants a failing task.

Ray's worker, in `store_task_errors` (`_raylet.pyx`), runs
`if ray.util.pdb._is_ray_debugger_post_mortem_enabled(): ray.util.pdb._post_mortem()` inside
the `except` that caught a task's or actor method's exception (sync, threaded and async actors
alike), before it stores the error for the caller. That is the one place a worker sees every
failing task with the exception in `sys.exc_info()`. Installing replaces the pair once per
process: the first answers yes only on that path (see `_enabled`), the second calls each
listener in order (`failures` records the error, then `debug` opens a post-mortem session),
then Ray's own debugger when RAY_DEBUG_POST_MORTEM asked for it. Nothing else in Ray changes:
Ray calls no other function there, and a listener's error never reaches Ray.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from types import TracebackType

log = logging.getLogger("rankscope")

Listener = Callable[[BaseException, TracebackType | None], None]
"""`listener(exc, tb)`, called on the failing task's thread; must never block for long
unless that is its point (a post-mortem session holds the task by design)."""

_listeners: list[Listener] = []
_lock = threading.Lock()
_installed = False
_WORKER_LOOP = "ray._private.worker"
"""The module of Ray's `main_loop`: the Python frame below Cython's `store_task_errors` in a
plain worker (threaded and async actors run tasks in threads with no Python frame below)."""


def add_listener(listener: Listener, *, first: bool = False) -> None:
    """Call `listener(exc, tb)` on every failing task of this process (once per listener).

    `first` puts it before those already added: a record must be taken before a post-mortem
    session holds the task. Example: `add_listener(record, first=True); install()`.
    """
    with _lock:
        if listener in _listeners:
            return
        if first:
            _listeners.insert(0, listener)
        else:
            _listeners.append(listener)


def install() -> bool:
    """Put the chain in Ray's hook (idempotent); False when Ray is not imported or lacks it."""
    global _installed
    with _lock:
        if _installed:
            return True
        if "ray" not in sys.modules:
            return False
        try:
            import ray.util

            hooks = ray.util.pdb
            ray_enabled = hooks._is_ray_debugger_post_mortem_enabled
            ray_post_mortem = hooks._post_mortem
        except Exception as exc:
            log.warning("rankscope: this Ray has no task-failure hook (%s)", exc)
            return False

        def enabled() -> bool:
            return _on_failure_path() or bool(ray_enabled())

        def on_task_error() -> None:
            _notify(sys.exc_info()[1])
            if ray_enabled():  # the user also asked for Ray's own (RAY_DEBUG_POST_MORTEM=1)
                ray_post_mortem()

        hooks._is_ray_debugger_post_mortem_enabled = enabled
        hooks._post_mortem = on_task_error
        _installed = True
        return True


def _on_failure_path() -> bool:
    """Whether Ray's task-failure path asks: it has no Python frame of its own, so its caller
    is Ray's worker loop or none. Python callers (Ray Data reads the flag to keep a UDF's
    original exception; Ray Serve on a failed request) get Ray's own answer, unchanged."""
    try:
        caller = sys._getframe(2)  # 0: here, 1: enabled(), 2: whoever asked
    except ValueError:  # no Python frame below: a threaded or async actor's task thread
        return True
    return caller.f_globals.get("__name__") == _WORKER_LOOP


def _notify(exc: BaseException | None) -> None:
    if exc is None:
        return
    for listener in list(_listeners):
        try:
            listener(exc, exc.__traceback__)
        except Exception as err:  # Ray stores the task's error next: ours must not stop it
            log.warning(
                "rankscope: a task-failure listener failed: %s: %s", type(err).__name__, err
            )
