"""The probe: a daemon thread in each worker process that keeps the hub informed.

It registers, heartbeats through a long poll, runs the hub's commands on its own thread (it
answers while the main thread waits in a collective: gloo and NCCL release the GIL) and batches
events. Heavy commands (`memory`) run on one worker thread within a time budget, so a slow
handler never stalls the heartbeat or piles up requests. When the hub is unreachable it backs
off and reconnects; no error of its own ever reaches the training code.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import pickle
import sys
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
from rankscope.runtime.capacity import MAX_HEARTBEAT_S
from rankscope.runtime.clock import ClockOffset
from rankscope.runtime.handler_worker import Handler, HandlerWorker
from rankscope.runtime.protocol import (
    SUMMARIES_BUDGET_BYTES,
    Command,
    CommandResult,
    Event,
    PollRequest,
    ProbeInfo,
    Progress,
    Summaries,
)

log = logging.getLogger("rankscope")

OWN_THREAD_PREFIX = "rankscope-"
"""Every thread rankscope starts is named so; `rankscope stacks` leaves them out."""
PROBE_THREAD_NAME = OWN_THREAD_PREFIX + "probe"
HANDLER_THREAD_NAME = OWN_THREAD_PREFIX + "handler"
"""The worker thread that runs heavy (off-thread) handlers."""
Summary = Callable[[], Any]
Startup = Callable[["Probe"], None]
_HANDLERS: dict[str, Handler] = {}
_OFF_THREAD: set[str] = set()
"""Kinds whose handlers run on the worker thread, within `Config.handler_budget`."""
_SUMMARIES: dict[str, Summary] = {}
_TICKS: list[Callable[[], None]] = []
GroupSource = Callable[[], dict[str, tuple[int, ...]]]
_GROUP_SOURCES: list[GroupSource] = []
_STARTUPS: list[Startup] = []
step_hooks: list[Callable[[], None]] = []
"""Called by every `rankscope.step()`; each must return at once when it has nothing to do."""
MetricsHook = Callable[[int, float, Any, Any, Any, dict[str, Any]], None]
"""`hook(step, time, loss, tokens, grad_norm, metrics)`: the numbers one `step()` was given."""
metrics_hooks: list[MetricsHook] = []
"""Called by every `rankscope.step()` with its numbers (the monitor keeps them)."""


def register_handler(kind: str, *, off_thread: bool = False) -> Callable[[Handler], Handler]:
    """Make `kind` a command probes answer; features register theirs at import time.

    A light handler (the default) runs inline on the probe thread, so it answers while the main
    thread waits in a collective; it must return in milliseconds. A heavy one (`off_thread=True`)
    runs on the probe's one worker thread, one command at a time: the probe waits for it at most
    `Config.handler_budget` seconds, then answers that it took too long, and answers "still busy"
    to a command that comes while the previous one still runs.
    """

    def decorate(fn: Handler) -> Handler:
        _HANDLERS[kind] = fn
        if off_thread:
            _OFF_THREAD.add(kind)
        else:
            _OFF_THREAD.discard(kind)
        return fn

    return decorate


def register_tick(fn: Callable[[], None]) -> Callable[[], None]:
    """Run `fn()` on the probe thread before each heartbeat: a sampling in microseconds."""
    _TICKS.append(fn)
    return fn


def register_summary(name: str) -> Callable[[Summary], Summary]:
    """Send `fn()` with every heartbeat, so the hub keeps what this process last reported.
    Every feature's summaries share `SUMMARIES_BUDGET_BYTES`, packed (`within_budget`)."""

    def decorate(fn: Summary) -> Summary:
        _SUMMARIES[name] = fn
        return fn

    return decorate


def register_groups(fn: GroupSource) -> GroupSource:
    """`fn()` names the process groups this process used (name -> global ranks). The probe
    sends them once, and again only when they change; the hub keeps one rank list per group
    (`HubClient.groups`), so summaries need not carry them. Called on the probe's thread."""
    _GROUP_SOURCES.append(fn)
    return fn


def register_step_hook(fn: Callable[[], None]) -> Callable[[], None]:
    """Run `fn()` in every `rankscope.step()` (features that pause or sample at step bounds)."""
    step_hooks.append(fn)
    return fn


def register_metrics_hook(fn: MetricsHook) -> MetricsHook:
    """Run `fn(step, time, loss, tokens, grad_norm, metrics)` in every `rankscope.step()`, on
    the training thread (cheap, never raising): `time` is the step's `time.time()`, the numbers
    are what the caller passed (None when not given, maybe tensors)."""
    metrics_hooks.append(fn)
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
        self.waiting: Callable[[], float | None] = lambda: None
        """Since when the oldest collective call still running runs: set by the collective
        recorder once it records (`hang.worker_recorder.oldest_call_start`)."""

    def tick(self) -> None:
        self.step += 1
        self.last_progress = time.time()

    def snapshot(self) -> Progress:
        try:
            waiting_since = self.waiting()
        except Exception:  # contained: a heartbeat never fails for it
            waiting_since = None
        return Progress(self.step, self.last_progress, waiting_since)


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
        self._link: Any = None
        self._registered: RankContext | None = None
        self.interval = config.heartbeat_interval
        """The long-poll wait the hub last asked for, never below the configured one."""
        self._groups_sent: dict[str, tuple[int, ...]] | None = None
        """The process groups the hub holds from us (None: none yet, e.g. after registering)."""
        self._create_time = _process_create_time()
        self.connected = threading.Event()
        self.clock = ClockOffset()
        """The hub's clock minus ours, from heartbeat round trips (`clock.estimate()`)."""
        self._worker = HandlerWorker(HANDLER_THREAD_NAME)
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
        self._worker.stop()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def busy_with(self) -> str | None:
        """The heavy command still running on the worker thread (perhaps past its budget)."""
        return self._worker.busy_with

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
        context = get_context()
        if self._hub is None or _identity(context) != _identity(self._registered):
            self._register(context)
        events = self._take_events()
        groups = self._changed_groups()
        request = PollRequest(
            self.probe_id, progress.snapshot(), events, self._dropped_events, _summaries(), groups
        )
        wait_s = self.interval
        sent = time.time()
        try:  # through the node's relay when the hub asks for relays (runtime.relay_actor)
            reply = self._via().poll(self._hub, context.node_id, request, wait_s)
        except Exception:
            self._return_events(events)
            raise
        if reply.hub_received is not None and reply.hub_replied is not None:
            self.clock.add(sent, reply.hub_received, reply.hub_replied, time.time())
        if reply.interval is not None:
            self.interval = _interval(reply.interval, self.config.heartbeat_interval)
        self._via().asked(reply)
        if reply.stop:  # Ray declared our node dead: the hub no longer watches us
            log.warning(
                "rankscope probe: stopping, the hub holds this process dead: %s", reply.stop
            )
            self._stop.set()
            return
        if not reply.known:  # the hub restarted and forgot us
            self._registered = None
            return
        if groups is not None:
            self._groups_sent = groups
        for command in reply.commands:
            self._answer(command)

    def send_last_words(self, *, with_events: bool = False) -> None:
        """Send the summaries now, without waiting for the reply or the next heartbeat: the
        process may be killed any moment (a peer died inside a collective). `with_events`: the
        queued events too (a task just raised: its record must beat the teardown). Fire and
        forget from the caller's thread; never raises."""
        try:
            if self._hub is None:
                return
            events = self._take_events() if with_events else ()
            groups = self._changed_groups()
            request = PollRequest(
                self.probe_id, progress.snapshot(), events, self._dropped_events, _summaries(),
                groups,
            )  # fmt: skip
            try:
                self._hub.last_words.remote(request)
            except Exception:
                self._return_events(events)  # the next heartbeat takes them
        except Exception:
            pass

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
        self._groups_sent = None  # a hub that (re)registers us may not have them
        self.connected.set()

    def _changed_groups(self) -> dict[str, tuple[int, ...]] | None:
        """The process groups when they differ from what the hub holds, else None."""
        groups = _groups()
        return None if groups is None or groups == self._groups_sent else groups

    def _answer(self, command: Command) -> None:
        self._via().reply(self._hub, self.run_command(command), command.id)

    def _via(self) -> Any:
        from rankscope.runtime.relay_actor import RelayLink  # late: it imports Ray

        self._link = self._link or RelayLink(self.config)
        return self._link

    def run_command(self, command: Command) -> CommandResult:
        """The reply to `command`; never raises. An off-thread handler holds the caller at most
        `config.handler_budget` seconds (longer only while C code keeps the GIL)."""
        handler = _HANDLERS.get(command.kind)
        if handler is None:
            return self._result(False, error=f"unknown command {command.kind}")
        if command.kind in _OFF_THREAD:
            return self._run_off_thread(command, handler)
        try:
            return self._result(True, payload=handler(command.args))
        except Exception as exc:
            log.debug("rankscope handler %s failed:\n%s", command.kind, traceback.format_exc())
            return self._result(False, error=f"{type(exc).__name__}: {exc}")

    def _run_off_thread(self, command: Command, handler: Handler) -> CommandResult:
        job = self._worker.submit(command.kind, handler, command.args)
        if isinstance(job, str):
            return self._result(False, error=job)
        budget = self.config.handler_budget
        if not job.done.wait(budget):
            log.debug("rankscope handler %s still runs after %.1fs", command.kind, budget)
            error = (
                f"{command.kind} took longer than {_seconds(budget)} s; answered nothing "
                "(the process is busy); try again"
            )
            return self._result(False, error=error)
        return self._result(job.ok, payload=job.payload, error=job.error)

    def _result(self, ok: bool, payload: Any = None, error: str = "") -> CommandResult:
        """An answer that says how far training got as it was given (`CommandResult`)."""
        return CommandResult(
            self.probe_id, ok, payload, error, progress.snapshot(), answered_at=time.time()
        )

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


def _summaries() -> Summaries:
    for tick in _TICKS:
        with contextlib.suppress(Exception):  # a feature's bug never stops the heartbeat
            tick()
    out = {}
    for name, fn in _SUMMARIES.items():
        try:
            out[name] = fn()
        except Exception as exc:
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    kept, dropped = within_budget(Summaries(out), SUMMARIES_BUDGET_BYTES)
    for name, size in dropped:
        if name not in _over_budget:  # once per feature: it is a bug in that feature
            _over_budget.add(name)
            log.warning(
                "rankscope probe: the %r summary (%d bytes) is left out of heartbeats that go "
                "over the %d-byte budget all features share",
                name, size, SUMMARIES_BUDGET_BYTES,
            )  # fmt: skip
    return kept


_over_budget: set[str] = set()
"""Summaries already warned about for going over the heartbeat budget."""


def within_budget(summaries: Summaries, budget: int) -> tuple[Summaries, list[tuple[str, int]]]:
    """`summaries` with the biggest ones replaced by a short note until all fit in `budget`
    bytes packed, and which were left out with their size. A feature that outgrows its share
    loses its own summary, not the hub's memory bound nor the other features' summaries."""
    sizes = summaries.sizes()
    total = sum(sizes.values())
    if total <= budget:
        return summaries, []
    notes: dict[str, Any] = {}
    dropped = []
    for name, size in sorted(sizes.items(), key=lambda kv: -kv[1]):
        if total <= budget:
            break
        note = {"error": f"over the heartbeat budget: {size} bytes ({budget} shared)"}
        notes[name] = note
        total += len(pickle.dumps(note, protocol=pickle.HIGHEST_PROTOCOL)) - size
        dropped.append((name, size))
    return summaries.replacing(notes), dropped


def _interval(asked: float, configured: float) -> float:
    """The hub's interval, within [configured, MAX_HEARTBEAT_S]."""
    return max(configured, min(float(asked), MAX_HEARTBEAT_S))


def _groups() -> dict[str, tuple[int, ...]] | None:
    """Every source's process groups; None when one failed (send nothing this time)."""
    out: dict[str, tuple[int, ...]] = {}
    for fn in _GROUP_SOURCES:
        try:
            out.update(fn())
        except Exception:
            return None
    return out


def _seconds(value: float) -> str:
    """2.0 -> "2.0", 0.25 -> "0.25": one decimal at least, as many as the value has."""
    return f"{value:.1f}" if value == round(value, 1) else f"{value:g}"


def _identity(context: RankContext | None) -> RankContext | None:
    """What we register; the task id changes with every task and is left out."""
    return None if context is None else replace(context, task_id=None)


def _ray_ready() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def _process_create_time() -> float:
    import psutil

    return float(psutil.Process().create_time())
