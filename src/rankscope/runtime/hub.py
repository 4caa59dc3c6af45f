"""The hub: one named, detached, async Ray actor that every probe and CLI talks to.

It keeps the registry of probes (keyed by job, so several jobs on one cluster never mix), turns
missed heartbeats into "dead" or "unresponsive" by checking the process on its own node, fans
commands out to probes and gathers the replies under a deadline, and appends the events probes
send to JSONL files in the run directory. Every queue is bounded and counts what it drops.

The actor is the remote surface and the event loop's driver only; each role's state and rules
live in a plain module of their own, readable without Ray: `registry` (probes and the reaping
rules), `liveness` (the process check on the probe's node), `mailbox` (command queues and the
replies a fan-out waits for), `coordination` (exchanges and claims) and `run_dir` (events and
artifacts on disk).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Sequence
from typing import Any

import ray

from rankscope._version import __version__
from rankscope.config import HUB_NAME, Config, hub_namespace
from rankscope.runtime.capacity import HeartbeatCost, dead_after_for, heartbeat_interval
from rankscope.runtime.coordination import Claims, Exchanges
from rankscope.runtime.hub_hooks import on_death
from rankscope.runtime.hub_relays import HubRelays
from rankscope.runtime.liveness import NODE_SWEEP_S, dead_nodes, processes_still_exist
from rankscope.runtime.mailbox import PendingReplies
from rankscope.runtime.protocol import (
    BatchReply,
    Command,
    CommandResult,
    Event,
    ExchangeResult,
    FanOutResult,
    FanOutRoutes,
    HubInfo,
    PollReply,
    PollRequest,
    ProbeInfo,
    ProbeRows,
    ProbeState,
    ProbeStatus,
    Progress,
)
from rankscope.runtime.registry import ProbeRecord, Registry
from rankscope.runtime.run_dir import (
    EventSink,
    choose_run_dir,
    read_reports,
    tail_events,
    write_atomically,
)

log = logging.getLogger("rankscope")


class Hub:
    """Registry, command fan-out and event sink. Created through `get_or_create_hub()`."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self._started_at = time.time()
        self._registry = Registry(mailbox_size=config.mailbox_size)
        self._replies = PendingReplies()
        self._relays = HubRelays()
        self._run_dir = choose_run_dir(config)
        self._events = EventSink(self._run_dir, config.hub_event_queue_size)
        self._exchanges = Exchanges()
        self._claims = Claims()
        self._background: list[asyncio.Future[None]] = []
        self._checks: set[asyncio.Future[None]] = set()
        self._interval = config.heartbeat_interval
        """The heartbeat interval asked of every probe now (`capacity.heartbeat_interval` of the
        live probes, recomputed by the reaper)."""
        self._live = 0
        """Live probes, as the reaper last counted them (every <= 1 s, not per poll)."""
        self._beats = 0
        """Heartbeats taken so far (a relay's batch counts its probes; last words too)."""
        self._cost = HeartbeatCost()
        """The CPU each costs this hub, measured live (`capacity.HeartbeatCost`)."""

    # ----------------------------------------------------------------- probes
    async def register(self, info: ProbeInfo, progress: Progress) -> str:
        """Add or refresh a probe; returns the hub's version so probes can warn on mismatch."""
        self._ensure_background()
        now = time.time()
        self._registry.register(info, progress, now)
        # who is who, kept in the run directory: a report after the job ended names the ranks
        registered = Event("probe.registered", now, {"context": dataclasses.asdict(info.context)})
        self._events.offer(info.context.job_id, info.probe_id, registered)
        return __version__

    @ray.method(enable_task_events=False)
    async def poll(self, request: PollRequest, wait_s: float) -> PollReply:
        """Heartbeat and long poll: returns at once with commands, else after `wait_s`. No
        task event per beat: Ray's threads pay for each, and the dashboard's task list would
        fill with them."""
        received = time.time()
        self._ensure_background()
        record = self._registry.find(request.probe_id)
        if record is None:
            return PollReply(known=False)
        self._relays.leave(record)  # it polls us itself now (its relay died, or none)
        self._heard(record, request)
        if record.reason:  # its node is gone: an orphan nobody watches any more
            return PollReply(known=True, interval=self._interval, stop=record.reason)
        await record.mailbox.wait(wait_s)
        if record.reason:  # its node was declared gone while it waited: no heartbeat after that
            return PollReply(known=True, interval=self._interval, stop=record.reason)
        commands = record.mailbox.take()
        record.last_seen = time.time()
        record.interval = self._interval  # its next poll waits so long: not silence
        return PollReply(
            known=True,
            commands=commands,
            hub_received=received,
            hub_replied=time.time(),
            interval=self._interval,
            relay=self._want_relays(),
        )

    @ray.method(enable_task_events=False)
    async def poll_batch(
        self,
        relay_id: str,
        entries: list[tuple[str, PollRequest]],
        wait_s: float,
        results: Sequence[tuple[CommandResult, str]] = (),
        endpoint: Any = None,
    ) -> BatchReply:
        """A node relay's poll (`runtime.relay`): the replies it carries taken as `reply_batch`
        takes them, every probe's heartbeat in it as `poll` takes one, then one long poll for
        all of the relay's probes; returns the commands by probe id (and the probes this hub
        does not know). `endpoint` (sent once) is how the CLI reaches the relay."""
        received = time.time()
        self._ensure_background()
        if endpoint is not None:
            self._relays.set_endpoint(relay_id, endpoint)
        for result, command_id in results:
            self._replies.resolve(command_id, result)
        replies: dict[str, tuple[bool, tuple[Command, ...]]] = {}
        stop: dict[str, str] = {}
        known = []
        for probe_id, request in entries:
            record = self._registry.find(probe_id)
            if record is None:
                replies[probe_id] = (False, ())
                continue
            self._heard(record, request)
            if record.reason:
                stop[probe_id] = record.reason
                continue
            self._relays.join(relay_id, record)
            known.append(record)
        await self._relays.wait(relay_id, wait_s)
        now = time.time()
        for record in known:  # parked at their relay all along: alive, as a long poll here
            if record.reason:  # declared gone while parked
                stop[record.info.probe_id] = record.reason
                continue
            record.last_seen, record.interval = now, self._interval
        replies.update((p, (True, c)) for p, c in self._relays.take(relay_id).items())
        return BatchReply(
            replies, received, time.time(), self._interval, stop, relay=self._want_relays()
        )

    async def last_words(self, request: PollRequest) -> None:
        """A probe's summaries and events sent at once, outside its long poll (a collective
        just failed: its peers may be killed before the next heartbeat). Takes no commands."""
        record = self._registry.find(request.probe_id)
        if record is not None:
            self._heard(record, request)

    def _heard(self, record: ProbeRecord, request: PollRequest) -> None:
        self._beats += 1
        record.heard_from(request, time.time())
        if request.groups:
            self._registry.learn_groups(record, request.groups)
        for event in request.events:
            self._events.offer(record.info.context.job_id, record.info.probe_id, event)

    def _want_relays(self) -> bool:
        above = self._config.relay_above
        return above >= 0 and self._live > above

    async def reply(self, result: CommandResult, command_id: str) -> None:
        """A probe's answer to one command; late answers (past the deadline) are ignored."""
        self._replies.resolve(command_id, result)

    async def reply_batch(self, results: list[tuple[CommandResult, str]]) -> None:
        """A relay's answers of its node's probes, each as `reply` takes one."""
        for result, command_id in results:
            self._replies.resolve(command_id, result)

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
        targets = self._registry.targets(job_id, probe_ids)
        answers = await self._replies.ask(
            [(r.info.probe_id, r.mailbox) for r in targets], kind, args, deadline
        )
        # who, not what: no summaries (megabytes when thousands miss the deadline)
        missing = tuple(r.status(()) for r in targets if r.info.probe_id not in answers)
        return FanOutResult(tuple(answers.values()), missing)

    async def fan_out_routes(
        self, job_id: str | None = None, probe_ids: list[str] | None = None
    ) -> FanOutRoutes:
        """How a fan-out to these live probes reaches them: the relayed ones through their
        node relays directly (the CLI calls each once), the others through `fan_out`."""
        targets = self._registry.targets(job_id, probe_ids)
        return self._relays.routes(targets, self._config.command_deadline)

    # ------------------------------------------------------------- rendezvous
    async def exchange(
        self, key: str, participant: int, payload: Any, expected: list[int], deadline_s: float
    ) -> ExchangeResult:
        """All-gather through the hub for processes that share no process group.

        Each participant sends its payload under the same key; the call returns when every
        expected participant has arrived, or after `deadline_s` with the absent ones named.
        """
        return await self._exchanges.exchange(key, participant, payload, expected, deadline_s)

    # -------------------------------------------------------------- artifacts
    async def claim(self, job_id: str, key: str, ttl_s: float) -> bool:
        """True for the first caller per (job, key) within `ttl_s`: one report, not one per rank."""
        return self._claims.claim(job_id, key, ttl_s, time.time())

    async def write_artifact(self, job_id: str, name: str, text: str) -> str:
        """Write `<run_dir>/<job>/<name>` atomically (temp name, then rename); returns its path."""
        if os.path.basename(name) != name or name.startswith("."):
            raise ValueError(f"artifact name {name!r} must be a plain file name")
        return await asyncio.to_thread(write_atomically, self._run_dir, job_id, name, text)

    # ------------------------------------------------------------------ reads
    async def read_events(
        self, job_id: str, kinds: list[str] | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        """The job's last `limit` events (of `kinds`, by prefix, when given), oldest first."""
        return await asyncio.to_thread(tail_events, self._run_dir, job_id, kinds, limit)

    async def read_reports(
        self, job_id: str
    ) -> tuple[dict[str, Any], list[str], list[tuple[str, int]]]:
        """The job's JSON reports in the run directory (see `run_dir.read_reports`)."""
        return await asyncio.to_thread(read_reports, self._run_dir, job_id)

    async def list_probes(
        self,
        job_id: str | None = None,
        summaries: list[str] | None = None,
        probe_ids: list[str] | None = None,
    ) -> list[ProbeStatus]:
        """The registry's rows (of `probe_ids` only, when given); a live probe's with only the
        `summaries` named (all when None): at 4,096 ranks every summary is megabytes a reader
        that shows none need not get, and pickling them seconds of the hub's CPU."""
        records = self._registry.records(job_id)
        if probe_ids is not None:
            wanted = set(probe_ids)
            records = [r for r in records if r.info.probe_id in wanted]
        return ProbeRows(r.status(summaries) for r in records)

    async def groups(self, job_id: str) -> dict[str, dict[str, tuple[int, ...]]]:
        """The job's process groups by worker group: name -> ranks (`PollRequest.groups`)."""
        return self._registry.groups(job_id)

    async def info(self) -> HubInfo:
        return HubInfo(
            version=__version__,
            run_dir=self._run_dir,
            started_at=self._started_at,
            jobs=self._registry.job_ids(),
            dropped_events=self._events.dropped,
        )

    async def ping(self) -> str:
        return __version__

    # -------------------------------------------------------------- internals
    def _ensure_background(self) -> None:
        if not self._background:
            self._background = [
                asyncio.ensure_future(self._reap_forever()),
                asyncio.ensure_future(self._watch_nodes_forever()),
                asyncio.ensure_future(self._events.write_forever()),
            ]

    async def _reap_forever(self) -> None:
        """Turn silence into a state: dead when the process is gone, else unresponsive."""
        configured = self._config.heartbeat_interval
        while True:
            await asyncio.sleep(min(configured, 1.0))
            now = time.time()
            silent: dict[str, list[ProbeRecord]] = {}
            for record in self._registry.to_check(now, self._config.dead_after, configured):
                silent.setdefault(record.info.context.node_id, []).append(record)
            for node_id, records in silent.items():
                self._checks.add(asyncio.ensure_future(self._classify_silent(node_id, records)))
            self._registry.forget_oldest_dead()
            self._relays.prune()  # relayed probes that died leave their relay's members
            self._live = self._registry.live_count()
            self._cost.sample(time.process_time(), self._beats)
            cost = self._cost.for_probes(self._live)
            self._interval = heartbeat_interval(self._live, configured, cost)

    async def _watch_nodes_forever(self) -> None:
        """Ray's verdict on nodes: probes on a node Ray declared dead are dead ("node gone"),
        even while they still heartbeat (a worker outlives its SIGKILL-ed raylet). One GCS
        read per NODE_SWEEP_S, in a thread, one at a time, only while a probe is alive: never
        on a heartbeat's or a command's path."""
        while True:
            await asyncio.sleep(NODE_SWEEP_S)
            if not self._registry.live_node_ids():
                continue
            try:
                dead = await asyncio.to_thread(dead_nodes)
            except Exception:  # the GCS is busy or restarting: the next sweep asks again
                continue
            for record in self._registry.mark_nodes_gone(dead):
                ctx = record.info.context
                log.warning("rankscope hub: %s (pid %s) is dead: %s", ctx.label, ctx.pid,
                            record.reason)  # fmt: skip
                self._died(record)

    def _died(self, record: ProbeRecord) -> None:
        """Once per probe, when it is marked dead: the questions it was asked end unanswered,
        and the features' word on a death (`hub_hooks`: the death alert) goes into the run
        directory."""
        self._replies.give_up_on(record.info.probe_id)
        job_id = record.info.context.job_id
        job = [r.status([]) for r in self._registry.records(job_id)]
        for kind, payload in on_death(record.status([]), job):
            self._events.offer(job_id, record.info.probe_id, Event(kind, time.time(), payload))

    async def _classify_silent(self, node_id: str, records: list[ProbeRecord]) -> None:
        """One node's silent probes: dead, unresponsive or back, by whether their processes
        are still there (one look on that node for all of them)."""
        try:
            infos = [r.info for r in records]
            exists = await processes_still_exist(node_id, infos, self._config.command_deadline)
        finally:
            for record in records:
                record.checking = False
            self._checks = {c for c in self._checks if not c.done()}
        interval, dead_after = self._config.heartbeat_interval, self._config.dead_after
        for record, there in zip(records, exists, strict=True):
            was = record.state
            record.settle(there, time.time(), dead_after_for(record.interval, interval, dead_after))
            if record.state == ProbeState.DEAD and was != ProbeState.DEAD:
                self._died(record)


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
