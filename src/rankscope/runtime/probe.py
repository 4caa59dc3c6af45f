"""The probe: a daemon thread in each worker process that keeps the hub informed.

It registers, heartbeats through a long poll, runs the commands the hub hands it on its own
thread (so it answers while the main thread is blocked in a collective: gloo and NCCL waits
release the GIL) and batches events. When the hub is unreachable it backs off and reconnects;
no error of its own ever reaches the training code.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from rankscope._version import __version__
from rankscope.config import Config
from rankscope.context import RankContext, get_context
from rankscope.runtime.protocol import (
    Command,
    CommandResult,
    Event,
    PollRequest,
    ProbeInfo,
    Progress,
)

log = logging.getLogger("rankscope")

OWN_THREAD_PREFIX = "rankscope-"
"""Every thread rankscope starts is named so; `rankscope stacks` leaves them out."""
PROBE_THREAD_NAME = OWN_THREAD_PREFIX + "probe"
Handler = Callable[[dict[str, Any]], Any]
Summary = Callable[[], Any]
Startup = Callable[["Probe"], None]
_HANDLERS: dict[str, Handler] = {}
_SUMMARIES: dict[str, Summary] = {}
_STARTUPS: list[Startup] = []
step_hooks: list[Callable[[], None]] = []
"""Called by every `rankscope.step()`; each must return at once when it has nothing to do."""


def register_handler(kind: str) -> Callable[[Handler], Handler]:
    """Make `kind` a command probes answer; features register theirs at import time."""

    def decorate(fn: Handler) -> Handler:
        _HANDLERS[kind] = fn
        return fn

    return decorate


def register_summary(name: str) -> Callable[[Summary], Summary]:
    """Send `fn()` with every heartbeat, so the hub keeps what this process last reported."""

    def decorate(fn: Summary) -> Summary:
        _SUMMARIES[name] = fn
        return fn

    return decorate


def register_step_hook(fn: Callable[[], None]) -> Callable[[], None]:
    """Run `fn()` in every `rankscope.step()` (features that pause or sample at step bounds)."""
    step_hooks.append(fn)
    return fn


def register_startup(fn: Startup) -> Startup:
    """Run `fn(probe)` when a probe starts (e.g. install a recorder, start a watchdog)."""
    _STARTUPS.append(fn)
    return fn


class _ProgressCounter:
    """Written by the training thread through `rankscope.step()`; read by the probe."""

    def __init__(self) -> None:
        self.step = 0
        self.last_progress = time.time()

    def tick(self) -> None:
        self.step += 1
        self.last_progress = time.time()

    def snapshot(self) -> Progress:
        return Progress(step=self.step, last_progress=self.last_progress)


progress = _ProgressCounter()


class Probe:
    """One per process; start with `rankscope.init()`, never directly."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.probe_id = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._events: collections.deque[Event] = collections.deque(maxlen=config.event_queue_size)
        self._events_lock = threading.Lock()
        self._dropped_events = 0
        self._stop = threading.Event()
        self._hub: Any = None
        self._registered: RankContext | None = None
        self._create_time = _process_create_time()
        self.connected = threading.Event()
        self._thread = threading.Thread(target=self._run, name=PROBE_THREAD_NAME, daemon=True)

    # ---------------------------------------------------------------- public
    def start(self) -> None:
        self._thread.start()
        for startup in _STARTUPS:
            try:
                startup(self)
            except Exception as exc:  # a broken feature must not stop the probe
                log.warning("rankscope: %s failed to start: %s", startup.__qualname__, exc)

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def emit(self, kind: str, payload: dict[str, Any]) -> None:
        """Queue an event for the run directory; never blocks, drops the oldest when full."""
        with self._events_lock:
            if len(self._events) == self._events.maxlen:
                self._dropped_events += 1
            self._events.append(Event(kind=kind, time=time.time(), payload=payload))

    # ------------------------------------------------------------------ loop
    def _run(self) -> None:
        backoff = self.config.heartbeat_interval
        while not self._stop.is_set():
            try:
                if not _ray_ready():
                    self._stop.wait(self.config.heartbeat_interval)
                    continue
                self._heartbeat()
                backoff = self.config.heartbeat_interval
            except SystemExit:  # Ray is shutting down under us (a driver's ray.shutdown())
                return
            except Exception as exc:  # contained: the job must never see our failures
                self._hub, self._registered = None, None
                self.connected.clear()
                log.debug("rankscope probe: hub unreachable (%s); retry in %.1fs", exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.config.reconnect_max_backoff)

    def _heartbeat(self) -> None:
        import ray

        context = get_context()
        if self._hub is None or _identity(context) != _identity(self._registered):
            self._register(context)
        events = self._take_events()
        request = PollRequest(
            self.probe_id, progress.snapshot(), events, self._dropped_events, _summaries()
        )
        wait_s = self.config.heartbeat_interval
        try:
            reply = ray.get(
                self._hub.poll.remote(request, wait_s),
                timeout=wait_s + self.config.command_deadline + 5.0,
            )
        except Exception:
            self._return_events(events)
            raise
        if not reply.known:  # the hub restarted and forgot us
            self._registered = None
            return
        for command in reply.commands:
            self._answer(command)

    def _register(self, context: RankContext) -> None:
        import ray

        from rankscope.runtime.hub import get_or_create_hub

        if self._hub is None:
            self._hub = get_or_create_hub(self.config)
        info = ProbeInfo(self.probe_id, context, __version__, self._create_time)
        hub_version = ray.get(
            self._hub.register.remote(info, progress.snapshot()),
            timeout=self.config.command_deadline + 30.0,  # first call may wait for the hub to start
        )
        if hub_version != __version__ and self._registered is None:
            log.warning("rankscope %s probe talks to a %s hub", __version__, hub_version)
        self._registered = context
        self.connected.set()

    def _answer(self, command: Command) -> None:
        handler = _HANDLERS.get(command.kind)
        if handler is None:
            result = CommandResult(self.probe_id, False, error=f"unknown command {command.kind}")
        else:
            try:
                result = CommandResult(self.probe_id, True, payload=handler(command.args))
            except Exception as exc:
                result = CommandResult(self.probe_id, False, error=f"{type(exc).__name__}: {exc}")
                log.debug("rankscope handler %s failed:\n%s", command.kind, traceback.format_exc())
        self._hub.reply.remote(result, command.id)

    def _take_events(self) -> tuple[Event, ...]:
        with self._events_lock:
            events = tuple(self._events)
            self._events.clear()
        return events

    def _return_events(self, events: tuple[Event, ...]) -> None:
        """Put unsent events back in front, keeping the newest when the buffer is full."""
        with self._events_lock:
            room = (self._events.maxlen or 0) - len(self._events)
            keep = events[max(0, len(events) - room) :]
            self._dropped_events += len(events) - len(keep)
            self._events.extendleft(reversed(keep))


def _summaries() -> dict[str, Any]:
    out = {}
    for name, fn in _SUMMARIES.items():
        try:
            out[name] = fn()
        except Exception as exc:
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def _identity(context: RankContext | None) -> RankContext | None:
    """What we register; the task id changes with every task and is left out."""
    return None if context is None else replace(context, task_id=None)


def _ray_ready() -> bool:
    import sys

    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def _process_create_time() -> float:
    import psutil

    return float(psutil.Process().create_time())
