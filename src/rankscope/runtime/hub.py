"""The hub: one named, detached, async Ray actor that every probe and CLI talks to.

It keeps the registry of probes (keyed by job, so several jobs on one cluster never mix), turns
missed heartbeats into "dead" or "unresponsive" by checking the process on its own node, fans
commands out to probes and gathers the replies under a deadline, and appends the events probes
send to JSONL files in the run directory. Every queue is bounded and counts what it drops.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rankscope._version import __version__
from rankscope.config import HUB_NAME, Config, hub_namespace
from rankscope.runtime.protocol import (
    Command,
    CommandResult,
    Event,
    ExchangeResult,
    FanOutResult,
    HubInfo,
    PollReply,
    PollRequest,
    ProbeInfo,
    ProbeState,
    ProbeStatus,
    Progress,
)

MAX_RENDEZVOUS = 1_000
"""Open rendezvous kept at once; the oldest is dropped (its waiters get what arrived)."""
MAX_DEAD_RECORDS = 10_000
"""Dead probes kept so a finished job can still be inspected; the oldest go first."""


@dataclass
class _ProbeRecord:
    info: ProbeInfo
    registered_at: float
    last_seen: float
    progress: Progress
    state: ProbeState = ProbeState.ALIVE
    dropped_events: int = 0
    dropped_commands: int = 0
    summaries: dict[str, Any] = field(default_factory=dict)
    mailbox: collections.deque[Command] = field(default_factory=collections.deque)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    checking: bool = False

    def status(self) -> ProbeStatus:
        return ProbeStatus(
            info=self.info,
            state=self.state,
            registered_at=self.registered_at,
            last_seen=self.last_seen,
            progress=self.progress,
            dropped_events=self.dropped_events,
            dropped_commands=self.dropped_commands,
            summaries=self.summaries,
        )


@dataclass
class _Rendezvous:
    expected: frozenset[int]
    payloads: dict[int, Any] = field(default_factory=dict)
    complete: asyncio.Event = field(default_factory=asyncio.Event)
    readers: int = 0


@ray.remote(num_cpus=0)
def _process_exists(pid: int, create_time: float) -> bool:
    """Runs on the probe's node: is that very process (not a reused pid) still there?"""
    import psutil

    try:
        return abs(psutil.Process(pid).create_time() - create_time) < 1.0
    except psutil.NoSuchProcess:
        return False


class Hub:
    """Registry, command fan-out and event sink. Created through `get_or_create_hub()`."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self._started_at = time.time()
        self._jobs: dict[str, dict[str, _ProbeRecord]] = {}
        self._pending: dict[str, asyncio.Future[CommandResult]] = {}
        self._events: asyncio.Queue[tuple[str, str, Event]] = asyncio.Queue(
            maxsize=config.hub_event_queue_size
        )
        self._dropped_events = 0
        self._run_dir = _choose_run_dir(config)
        self._rendezvous: collections.OrderedDict[str, _Rendezvous] = collections.OrderedDict()
        self._claims: dict[tuple[str, str], float] = {}
        self._background: list[asyncio.Future[None]] = []
        self._checks: set[asyncio.Future[None]] = set()

    # ----------------------------------------------------------------- probes
    async def register(self, info: ProbeInfo, progress: Progress) -> str:
        """Add or refresh a probe; returns the hub's version so probes can warn on mismatch."""
        self._ensure_background()
        now = time.time()
        probes = self._jobs.setdefault(info.context.job_id, {})
        record = probes.get(info.probe_id)
        if record is None:
            probes[info.probe_id] = _ProbeRecord(info, now, now, progress)
        else:
            record.info, record.last_seen, record.progress = info, now, progress
            record.state = ProbeState.ALIVE
        return __version__

    async def poll(self, request: PollRequest, wait_s: float) -> PollReply:
        """Heartbeat and long poll: returns at once with commands, else after `wait_s`."""
        self._ensure_background()
        record = self._find(request.probe_id)
        if record is None:
            return PollReply(known=False)
        record.last_seen = time.time()
        record.state = ProbeState.ALIVE
        record.progress = request.progress
        record.dropped_events = request.dropped_events
        record.summaries = request.summaries
        for event in request.events:
            self._enqueue_event(record.info.context.job_id, record.info.probe_id, event)
        if not record.mailbox:
            record.wakeup.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(record.wakeup.wait(), timeout=wait_s)
        commands = tuple(record.mailbox)
        record.mailbox.clear()
        record.last_seen = time.time()
        return PollReply(known=True, commands=commands)

    async def reply(self, result: CommandResult, command_id: str) -> None:
        """A probe's answer to one command; late answers (past the deadline) are ignored."""
        future = self._pending.get(command_id)
        if future is not None and not future.done():
            future.set_result(result)

    # --------------------------------------------------------------- commands
    async def fan_out(
        self,
        kind: str,
        args: dict[str, Any] | None = None,
        *,
        job_id: str | None = None,
        probe_ids: list[str] | None = None,
        deadline_s: float | None = None,
    ) -> FanOutResult:
        """Send one command to every live probe selected and gather replies under a deadline."""
        deadline = self._config.command_deadline if deadline_s is None else deadline_s
        wanted = None if probe_ids is None else set(probe_ids)
        targets = [
            r
            for r in self._records(job_id)
            if r.state != ProbeState.DEAD and (wanted is None or r.info.probe_id in wanted)
        ]
        futures: dict[str, asyncio.Future[CommandResult]] = {}
        command_ids: list[str] = []
        loop = asyncio.get_running_loop()
        for record in targets:
            command = Command(id=uuid.uuid4().hex, kind=kind, args=dict(args or {}))
            if len(record.mailbox) >= self._config.mailbox_size:
                record.mailbox.popleft()
                record.dropped_commands += 1
            record.mailbox.append(command)
            record.wakeup.set()
            command_ids.append(command.id)
            futures[record.info.probe_id] = self._pending[command.id] = loop.create_future()
        try:
            if futures:
                await asyncio.wait(futures.values(), timeout=deadline)
        finally:
            for command_id in command_ids:
                self._pending.pop(command_id, None)
        replies = tuple(f.result() for f in futures.values() if f.done())
        missing = tuple(r.status() for r in targets if not futures[r.info.probe_id].done())
        return FanOutResult(replies, missing, tuple(r.status() for r in targets))

    # ------------------------------------------------------------- rendezvous
    async def exchange(
        self, key: str, participant: int, payload: Any, expected: list[int], deadline_s: float
    ) -> ExchangeResult:
        """All-gather through the hub for processes that share no process group.

        Each participant sends its payload under the same key; the call returns when every
        expected participant has arrived, or after `deadline_s` with the absent ones named.
        """
        rv = self._rendezvous.get(key)
        if rv is None:
            rv = self._rendezvous[key] = _Rendezvous(frozenset(expected))
            while len(self._rendezvous) > MAX_RENDEZVOUS:
                _, oldest = self._rendezvous.popitem(last=False)
                oldest.complete.set()
        rv.payloads[participant] = payload
        if rv.expected <= rv.payloads.keys():
            rv.complete.set()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(rv.complete.wait(), timeout=deadline_s)
        missing = tuple(sorted(rv.expected - rv.payloads.keys()))
        result = ExchangeResult(key, dict(rv.payloads), missing)
        rv.readers += 1
        if rv.readers >= len(rv.payloads) and self._rendezvous.get(key) is rv:
            del self._rendezvous[key]  # everyone who came has read it
        return result

    # -------------------------------------------------------------- artifacts
    async def claim(self, job_id: str, key: str, ttl_s: float) -> bool:
        """True for the first caller per (job, key) within `ttl_s`: one report, not one per rank."""
        now = time.time()
        self._claims = {k: t for k, t in self._claims.items() if t > now}
        if (job_id, key) in self._claims:
            return False
        self._claims[(job_id, key)] = now + ttl_s
        return True

    async def write_artifact(self, job_id: str, name: str, text: str) -> str:
        """Write `<run_dir>/<job>/<name>` atomically (temp name, then rename); returns its path."""
        if os.path.basename(name) != name or name.startswith("."):
            raise ValueError(f"artifact name {name!r} must be a plain file name")
        return await asyncio.to_thread(_write_atomically, self._run_dir, job_id, name, text)

    # ------------------------------------------------------------------ reads
    async def read_events(
        self, job_id: str, kinds: list[str] | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        """The job's last `limit` events (of `kinds`, by prefix, when given), oldest first."""
        return await asyncio.to_thread(_tail_events, self._run_dir, job_id, kinds, limit)

    async def list_probes(self, job_id: str | None = None) -> list[ProbeStatus]:
        return [r.status() for r in self._records(job_id)]

    async def info(self) -> HubInfo:
        return HubInfo(
            version=__version__,
            run_dir=self._run_dir,
            started_at=self._started_at,
            jobs=tuple(self._jobs),
            dropped_events=self._dropped_events,
        )

    async def ping(self) -> str:
        return __version__

    # -------------------------------------------------------------- internals
    def _find(self, probe_id: str) -> _ProbeRecord | None:
        for probes in self._jobs.values():
            if probe_id in probes:
                return probes[probe_id]
        return None

    def _records(self, job_id: str | None) -> list[_ProbeRecord]:
        if job_id is not None:
            return list(self._jobs.get(job_id, {}).values())
        return [r for probes in self._jobs.values() for r in probes.values()]

    def _enqueue_event(self, job_id: str, probe_id: str, event: Event) -> None:
        try:
            self._events.put_nowait((job_id, probe_id, event))
        except asyncio.QueueFull:
            self._dropped_events += 1

    def _ensure_background(self) -> None:
        if not self._background:
            self._background = [
                asyncio.ensure_future(self._reap_forever()),
                asyncio.ensure_future(self._write_events_forever()),
            ]

    async def _reap_forever(self) -> None:
        """Turn silence into a state: dead when the process is gone, else unresponsive."""
        while True:
            await asyncio.sleep(min(self._config.heartbeat_interval, 1.0))
            now = time.time()
            for record in self._records(None):
                silent = now - record.last_seen > self._config.dead_after
                if silent and record.state != ProbeState.DEAD and not record.checking:
                    record.checking = True
                    self._checks.add(asyncio.ensure_future(self._classify_silent(record)))
            self._forget_oldest_dead()

    async def _classify_silent(self, record: _ProbeRecord) -> None:
        info = record.info
        try:
            ref = _process_exists.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(info.context.node_id, soft=False)
            ).remote(info.context.pid, info.create_time)
            exists = await asyncio.wait_for(ref, timeout=self._config.command_deadline)
        except asyncio.TimeoutError:
            exists = True  # the node is slow, not proven gone: keep looking
        except Exception:
            exists = False  # the node is gone or refuses work: so is the process
        finally:
            record.checking = False
            self._checks = {c for c in self._checks if not c.done()}
        if time.time() - record.last_seen > self._config.dead_after:
            record.state = ProbeState.UNRESPONSIVE if exists else ProbeState.DEAD

    def _forget_oldest_dead(self) -> None:
        dead = [
            (r.last_seen, job, r.info.probe_id)
            for job, probes in self._jobs.items()
            for r in probes.values()
            if r.state == ProbeState.DEAD
        ]
        for _, job, probe_id in sorted(dead)[: max(0, len(dead) - MAX_DEAD_RECORDS)]:
            del self._jobs[job][probe_id]

    async def _write_events_forever(self) -> None:
        """Drain the event queue into <run_dir>/<job>/events.jsonl in batches."""
        while True:
            batch = [await self._events.get()]
            while not self._events.empty() and len(batch) < 1000:
                batch.append(self._events.get_nowait())
            try:
                await asyncio.to_thread(_append_events, self._run_dir, batch)
            except OSError:
                self._dropped_events += len(batch)


def _append_events(run_dir: str, batch: list[tuple[str, str, Event]]) -> None:
    by_job: dict[str, list[str]] = collections.defaultdict(list)
    for job_id, probe_id, event in batch:
        by_job[job_id].append(json.dumps({"probe_id": probe_id, **asdict(event)}, default=str))
    for job_id, lines in by_job.items():
        job_dir = os.path.join(run_dir, job_id or "no-job")
        os.makedirs(job_dir, exist_ok=True)
        with open(os.path.join(job_dir, "events.jsonl"), "a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


EVENT_SCAN_BYTES = 64 << 20
"""How far back from the end of events.jsonl a read looks for matching events."""


def _tail_events(
    run_dir: str, job_id: str, kinds: list[str] | None, limit: int
) -> list[dict[str, Any]]:
    path = os.path.join(run_dir, job_id or "no-job", "events.jsonl")
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            start = max(0, f.tell() - EVENT_SCAN_BYTES)
            f.seek(start)
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    if start > 0:
        lines = lines[1:]  # the first line was cut in the middle
    found: list[dict[str, Any]] = []
    for raw in reversed(lines):
        try:
            event = json.loads(raw)
        except ValueError:
            continue
        if kinds is None or str(event.get("kind", "")).startswith(tuple(kinds)):
            found.append(event)
            if len(found) >= limit:
                break
    return found[::-1]


def _write_atomically(run_dir: str, job_id: str, name: str, text: str) -> str:
    job_dir = os.path.join(run_dir, job_id or "no-job")
    os.makedirs(job_dir, exist_ok=True)
    path = os.path.join(job_dir, name)
    with tempfile.NamedTemporaryFile("w", dir=job_dir, delete=False, encoding="utf-8") as f:
        f.write(text)
    os.replace(f.name, path)
    return path


def _choose_run_dir(config: Config) -> str:
    """RANKSCOPE_RUN_DIR, else `rankscope/` inside this Ray session's directory."""
    if config.run_dir:
        return config.run_dir
    try:
        from ray._private.worker import _global_node

        session_dir: str = _global_node.get_session_dir_path()  # type: ignore[attr-defined]
        return os.path.join(session_dir, "rankscope")
    except Exception:
        return os.path.join(tempfile.gettempdir(), "rankscope")


HubActor = ray.remote(Hub)


def hub_options(config: Config) -> dict[str, Any]:
    """How the hub is created: detached, restartable, on the head node, costing no CPU."""
    return {
        "name": HUB_NAME,
        "namespace": hub_namespace(),
        "get_if_exists": True,
        "lifetime": "detached",
        "num_cpus": 0,
        "max_restarts": -1,
        "max_concurrency": 10_000,
        "resources": {"node:__internal_head__": 0.001},
        "runtime_env": {"env_vars": {"RANKSCOPE_ROLE": "hub"}},
    }


def get_or_create_hub(config: Config) -> Any:
    """The cluster's hub, started if missing; safe when many probes race to create it."""
    return HubActor.options(**hub_options(config)).remote(config)


def find_hub() -> Any | None:
    """The running hub, or None; never creates one (the CLI must not start a hub by itself)."""
    try:
        return ray.get_actor(HUB_NAME, namespace=hub_namespace())
    except ValueError:
        return None
