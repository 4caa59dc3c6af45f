"""Worker side: catch the exception that ends a rank's work where it arises, with no code change.

Installed by every probe's start-up (`rankscope.init()`, `setup_worker`):
- Ray's task-failure hook (`runtime.task_failure`, first in its chain): a task or an actor
  method that raises, sync, threaded or async;
- Ray Train's training-thread runner: v2's `ThreadRunner` turns the loop's exception into its
  own error with `construct_user_exception_with_traceback`, v1's `RunnerThread` hands it on
  with `_propagate_exception`; each is wrapped as its module is imported (the actor's class
  loads after the setup hook), calling the original unchanged;
- `threading.excepthook` for a user thread that dies of an exception (the previous hook runs
  after, as before).
Each record is a `task_error` event and an `exception` alert, sent to the hub at once with the
process's last words: verl's driver and Ray Train tear the group down within seconds, before
the next heartbeat. One record per (type, where) per 5 s; nothing here raises into the job.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import sysconfig
import threading
import time
import traceback
from functools import lru_cache
from types import ModuleType, TracebackType
from typing import Any

from rankscope import level
from rankscope.alerts.model import Alert
from rankscope.alerts.worker import publish
from rankscope.context import get_context
from rankscope.failures.analysis import RateLimit, TraceFrame, alert_message, task_error
from rankscope.failures.analysis import worth_recording as _worth_recording
from rankscope.failures.model import EVENT_KIND, TaskError
from rankscope.import_hooks import when_imported
from rankscope.runtime import task_failure
from rankscope.runtime.api import current_probe
from rankscope.runtime.probe import OWN_THREAD_PREFIX, Probe, register_startup

log = logging.getLogger("rankscope")

ALERT_RULE = "exception"
_FRAMES_KEPT = 200
"""The innermost frames read from a traceback (a RecursionError has ~1,000)."""
_limit = RateLimit()
_lock = threading.Lock()
_installed = False
_TRAIN_V2 = "ray.train.v2._internal.execution.worker_group.thread_runner"
_TRAIN_V1 = "ray.air._internal.util"
_MARK = "_rankscope_failures"


def record(
    exc: BaseException, tb: TracebackType | None = None, *, via: str, task: str | None = None
) -> TaskError | None:
    """Record `exc` as the exception that ended this rank's work: a `task_error` event and an
    `exception` alert, sent now. `task`: None asks Ray for the running task's name; "" names
    it by the user's outermost function. Returns the record (None when skipped); never raises."""
    try:
        if not level.RECORDING or not _worth_recording(type(exc).__name__):
            return None
        error = _build(exc, exc.__traceback__ if tb is None else tb, via=via, task=task)
        with _lock:
            if not _limit.allow((error.exc_type, error.where), error.time):
                return None
        probe = current_probe()
        if probe is not None:
            probe.emit(EVENT_KIND, error.to_payload())
        if not (error.in_collective or error.echo):  # an effect pages no one: its cause does
            alert = Alert(
                ALERT_RULE, "error", alert_message(error), error.time, rank=error.rank,
                group=error.group,
            )  # fmt: skip
            publish([alert])
        if probe is not None:
            probe.send_last_words(with_events=True)
        return error
    except Exception as err:  # the job's own exception goes on; ours is only lost
        log.debug("rankscope: task error not recorded: %s: %s", type(err).__name__, err)
        return None


def _build(
    exc: BaseException, tb: TracebackType | None, *, via: str, task: str | None
) -> TaskError:
    ctx = get_context()
    summary = traceback.extract_tb(tb, limit=-_FRAMES_KEPT) if tb is not None else []
    frames = [TraceFrame(f.filename, f.lineno or 0, f.name) for f in summary]
    text = "".join(traceback.format_exception(type(exc), exc, tb, limit=-_FRAMES_KEPT))
    cause = getattr(exc, "cause", None)  # a RayTaskError passes another task's error on
    echo = isinstance(cause, BaseException) and type(exc).__name__.startswith("RayTaskError")
    thread = threading.current_thread().name
    return task_error(
        exc_type=type(exc).__name__,
        message=str(cause if echo else exc),
        frames=frames,
        traceback_text=text,
        roots=library_roots(),
        rank=ctx.rank,
        group=ctx.group,
        pid=ctx.pid,
        hostname=ctx.hostname,
        actor=ctx.actor_class,
        task=_ray_task_name() if task is None else task,
        thread=thread,
        time=time.time(),
        via=via,
        echo=echo,
    )


def _ray_task_name() -> str | None:
    ray = sys.modules.get("ray")
    if ray is None:
        return None
    with contextlib.suppress(Exception):
        name = ray.get_runtime_context().get_task_name()
        return str(name) if name else None
    return None


@lru_cache(maxsize=1)
def library_roots() -> tuple[str, ...]:
    """Folders of code that is not the user's: the standard library and installed packages."""
    keys = ("stdlib", "platstdlib", "purelib", "platlib")
    roots = {os.path.abspath(sysconfig.get_paths()[k]) for k in keys}
    roots.update(p for p in sys.path if "site-packages" in p or "dist-packages" in p)
    return tuple(sorted(roots))


# ----------------------------------------------------------------- the hooks
def _on_task_failure(exc: BaseException, tb: TracebackType | None) -> None:
    record(exc, tb, via="ray_task")


def _on_thread_death(args: Any) -> None:
    thread = args.thread
    name = thread.name if thread is not None else ""
    if args.exc_value is not None and not name.startswith(OWN_THREAD_PREFIX):
        record(args.exc_value, args.exc_traceback, via="thread", task=name or None)


def install() -> None:
    """Install every hook in this process (idempotent); never raises."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    try:
        task_failure.add_listener(_on_task_failure, first=True)
        task_failure.install()
        _chain_thread_hook()
        when_imported({_TRAIN_V2: _patch_train_v2, _TRAIN_V1: _patch_train_v1})
    except Exception as exc:
        log.warning("rankscope: exception hooks not installed: %s", exc)


@register_startup
def _start(probe: Probe) -> None:
    install()


def _chain_thread_hook() -> None:
    previous = threading.excepthook
    if getattr(previous, _MARK, False):
        return

    def excepthook(args: Any) -> None:
        try:
            if args.exc_type is not SystemExit:  # as Python's own hook: a quiet exit
                _on_thread_death(args)
        finally:
            previous(args)

    setattr(excepthook, _MARK, True)
    threading.excepthook = excepthook


def _patch_train_v2(module: ModuleType) -> None:
    """v2's `ThreadRunner` calls this module's `construct_user_exception_with_traceback(e, ...)`
    in the `except` that caught the train loop's exception; the wrapper records `e` first."""
    original = module.construct_user_exception_with_traceback
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def construct(e: BaseException, *args: Any, **kwargs: Any) -> Any:
        record(e, e.__traceback__, via="ray_train", task="")  # "": named by the loop's function
        return original(e, *args, **kwargs)

    setattr(construct, _MARK, True)
    setattr(module, "construct_user_exception_with_traceback", construct)  # noqa: B010


def _patch_train_v1(module: ModuleType) -> None:
    """v1's `RunnerThread` hands the loop's exception to `_propagate_exception(e)`."""
    runner = getattr(module, "RunnerThread", None)
    original = getattr(runner, "_propagate_exception", None)
    if runner is None or original is None or getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def propagate(self: threading.Thread, e: BaseException) -> Any:
        record(e, e.__traceback__, via="ray_train", task="")
        return original(self, e)

    setattr(propagate, _MARK, True)
    runner._propagate_exception = propagate
