"""Post-mortem sessions: an uncaught exception in a worker opens a session at the raising frame.

Only while debugging is on (RANKSCOPE_DEBUG=1, the full level, or `enable_full_debugging()`),
or where RANKSCOPE_POST_MORTEM=1 asks for it: otherwise the exception goes on at once, so a
`post_mortem()` left in production code never holds a failing task. Three ways in, all ending
in the same registry and timeout, after which the exception goes on as usual (a Ray task's
caller gets its RayTaskError):
- `rankscope.post_mortem()` in a worker: every task or actor method of this process;
- RANKSCOPE_POST_MORTEM=1 in the job's environment: the same with no code change;
- `@rankscope.post_mortem` on a function or class, or `with rankscope.post_mortem():`, for a
  scope of your choice (also outside Ray).
The process-wide form uses the hook Ray's own worker calls on a failing task
(`ray.util.pdb._post_mortem`, the one behind RAY_DEBUG_POST_MORTEM).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import sys
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

log = logging.getLogger("rankscope")

T = TypeVar("T")
_MARK = "_rankscope_post_mortem_done"
_installed = False


class PostMortem:
    """A context manager and decorator that opens a post-mortem session on an exception."""

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = timeout

    def __enter__(self) -> PostMortem:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, Exception):
            handle(exc, tb, timeout=self.timeout)

    def __call__(self, target: T) -> T:
        if inspect.isclass(target):
            for attr, value in list(vars(target).items()):
                if inspect.isfunction(value) and _is_wrapped_method(attr):
                    setattr(target, attr, self._wrap(value))
            return target
        if callable(target):
            wrapped: T = self._wrap(target)
            return wrapped
        raise TypeError(f"post_mortem decorates functions and classes, not {type(target).__name__}")

    def _wrap(self, fn: Callable[..., Any]) -> Any:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                with self:
                    return await fn(*args, **kwargs)

            return run_async

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return run


def _is_wrapped_method(name: str) -> bool:
    return not name.startswith("__") or name in ("__init__", "__call__")


def post_mortem(target: Any = None, *, timeout: float | None = None) -> Any:
    """Open a debug session at the raising frame of uncaught exceptions (then they propagate).

    Called with no argument in a worker it covers every task and actor method of the process
    and returns a context manager; given a function or class it decorates it.
    Example: `rankscope.post_mortem()` in an actor's `__init__`, or `@rankscope.post_mortem`.
    """
    scope = PostMortem(timeout)
    if target is None:
        install_ray_hook(timeout)
        return scope
    return scope(target)


def handle(exc: BaseException, tb: TracebackType | None, *, timeout: float | None = None) -> None:
    """Serve one post-mortem session for `exc` unless one was served already or debugging is off."""
    try:
        if getattr(exc, _MARK, False) or not _sessions_wanted():
            return
        with contextlib.suppress(Exception):
            setattr(exc, _MARK, True)
        from rankscope.debug.worker_breakpoint import default_timeout
        from rankscope.debug.worker_server import serve_post_mortem

        serve_post_mortem(exc, tb, timeout=default_timeout() if timeout is None else timeout)
    except Exception as err:  # the user's exception must go on, not ours
        log.warning("rankscope: post-mortem session failed: %s: %s", type(err).__name__, err)


def install_ray_hook(timeout: float | None = None) -> bool:
    """Make this Ray worker open a session when a task or actor method raises.

    Through `runtime.task_failure`'s chain on Ray's hook, after the listeners put first (the
    `failures` record), before Ray's own debugger when RAY_DEBUG_POST_MORTEM asks for it.
    """
    global _installed
    if _installed:
        return True
    if "ray" not in sys.modules:
        return False
    from rankscope.runtime import task_failure

    def on_task_error(exc: BaseException, tb: TracebackType | None) -> None:
        handle(exc, tb, timeout=timeout)

    if not task_failure.install():
        log.warning("rankscope: no post-mortem through Ray's hook; use @rankscope.post_mortem")
        return False
    task_failure.add_listener(on_task_error)
    _installed = True
    return True


def _sessions_wanted() -> bool:
    from rankscope.debug.worker_breakpoint import debugging_enabled

    return debugging_enabled() or _env_asks()


def _env_asks() -> bool:
    return os.environ.get("RANKSCOPE_POST_MORTEM", "") in ("1", "true", "yes")


def install_from_env() -> None:
    """RANKSCOPE_POST_MORTEM=1: install the hook when rankscope is imported in a Ray worker."""
    if _env_asks():
        try:
            install_ray_hook()
        except Exception as exc:
            log.warning("rankscope: post-mortem hook not installed: %s", exc)
