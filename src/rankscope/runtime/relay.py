"""Node relays: one batched hub call per node instead of one per probe (issue 20).

Every heartbeat and every command reply is a Ray actor call into the one hub process, and each
costs the hub about what a bare actor call costs (`capacity`): at 4,096 ranks a command fan-out
alone is ~12,000 hub calls (the poll that returns the command, the reply, the next poll). With
relays, a node's probes long-poll a relay on their own node instead; the relay sends the hub
one batched poll with its probes' heartbeats (`Hub.poll_batch`), hands each probe the commands
the hub returns for it, and sends their replies back with its next batched poll, the one that
waits for the next commands (or in a call of their own, `Hub.reply_batch`, when they come while
a batch waits at the hub).
The hub's registry, liveness, events and groups stay per probe, exactly as with direct polls.

A command for relayed probes skips the hub altogether: the CLI asks the hub which relay each
probe polls through (`Hub.fan_out_routes`) and calls each relay once (`RelayCore.commands`); the
relay hands the command to its parked probes and returns their answers by the deadline. Through
the hub, a fan-out costs it ~2 calls per node and every reply's bytes in and out again, seconds
of its CPU per `stacks` at 4,096 ranks (docs/PERFORMANCE.md, Scale).

`RelayCore` is the relay's logic (asyncio, no Ray): the Ray actor (`relay_actor.Relay`) wraps
it, and the probe simulator hosts the same class in process. `hub_relays.HubRelays` is the hub's
side.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from rankscope.runtime.protocol import (
    BatchReply,
    Command,
    CommandResult,
    PollReply,
    PollRequest,
)

__all__ = ["BATCH_WAIT_SHARE", "RelayCore", "RelayHub", "merge_requests"]

BATCH_WAIT_SHARE = 0.5
"""The relay's batched long poll waits this share of the probes' interval: a probe that polls
while a batch is out waits for it and its own batch, together within one interval. A probe whose
batch came back early is answered when its interval is up (`RelayCore._answer_later`)."""
REPLY_LINGER_S = 0.1
"""Replies wait this long at most for the node's other replies to the same commands, and the
next batched poll waits as long at most for the answers to commands it just handed out, so they
ride on it rather than in a call of their own."""
HELD_COMMANDS = 64
"""Commands kept for a probe that is not parked at the relay (as the hub's mailbox size)."""
MAX_HELD_EVENTS = 1000
"""A probe's events held at its relay while its heartbeats wait for a slow hub, at most."""
FORGET_AFTER_S = 600.0
"""A probe that has not polled for this long is forgotten by its relay."""


class RelayHub(Protocol):
    """The two hub calls a relay makes (the actor awaits the hub handle's methods)."""

    async def poll_batch(
        self,
        relay_id: str,
        entries: list[tuple[str, PollRequest]],
        wait_s: float,
        results: list[tuple[CommandResult, str]],
        endpoint: Any,
    ) -> BatchReply: ...

    async def reply_batch(self, results: list[tuple[CommandResult, str]]) -> None: ...


@dataclass
class _Gathering:
    """A command sent to this relay's probes directly (`RelayCore.commands`): who has not
    answered yet, the answers so far, and a future set once all are in."""

    waiting: set[str]
    answers: list[CommandResult]
    done: asyncio.Future[None]


def merge_requests(old: PollRequest, new: PollRequest) -> PollRequest:
    """Two heartbeats of one probe not yet forwarded, as one: the newest progress and
    summaries, the events of both (oldest first, the newest `MAX_HELD_EVENTS` kept while the
    hub is slow; the rest counted as dropped), the newest group lists sent."""
    groups = new.groups if new.groups is not None else old.groups
    events = old.events + new.events
    kept = events[-MAX_HELD_EVENTS:]
    dropped = new.dropped_events + len(events) - len(kept)
    return replace(new, events=kept, groups=groups, dropped_events=dropped)


@dataclass
class _Slot:
    """One probe as its relay sees it."""

    last_poll: float
    pending: PollRequest | None = None
    """Its heartbeat not yet forwarded to the hub."""
    waiter: asyncio.Future[PollReply] | None = None
    """Its poll parked here, answered with commands or when the batch with its request returns."""
    flying: asyncio.Future[PollReply] | None = None
    """The waiter whose request is in the batch at the hub now: it gets the hub's times."""
    held: list[Command] = field(default_factory=list)
    """Commands the hub returned while the probe was not parked: its next poll takes them."""


class RelayCore:
    """One node's relay: parks its probes' polls, batches them into one hub call, routes the
    commands back per probe and batches the replies. Never raises into a probe's call except
    when the hub call itself failed (the probe then polls the hub directly)."""

    def __init__(
        self,
        relay_id: str,
        hub: RelayHub,
        *,
        endpoint: Any = None,
        linger_s: float = REPLY_LINGER_S,
    ) -> None:
        self.relay_id = relay_id
        self._hub = hub
        self._endpoint = endpoint
        """What the CLI calls `commands` on (an actor handle); sent to the hub with the first
        batch that reaches it, and again after a failed one (the hub may be a new one)."""
        self._endpoint_sent = False
        self._direct: dict[str, _Gathering] = {}
        """Commands sent here directly, by command id, while their caller waits."""
        self._linger_s = linger_s
        self._slots: dict[str, _Slot] = {}
        self._wake = asyncio.Event()
        self._replies: list[tuple[CommandResult, str]] = []
        self._expected: dict[tuple[str, str], float] = {}
        """(command id, probe id) handed and not answered yet, with when they were handed."""
        self._answered = asyncio.Event()
        self._runner: asyncio.Future[None] | None = None
        self._flusher: asyncio.Future[None] | None = None
        self.wait_s = 1.0
        """The probes' interval (their long-poll wait), as the hub last asked."""
        self._batch_out = False
        """A batched poll waits at the hub: replies then go in a call of their own."""
        self.batches = self.reply_batches = self.failures = 0

    async def poll(self, request: PollRequest, wait_s: float) -> PollReply:
        """A probe's heartbeat: returns with its commands, or when the batch that carried it
        comes back (within about `wait_s`), as the hub's own `poll` would."""
        self._ensure_running()
        self.wait_s = wait_s
        now = time.time()
        slot = self._slots.get(request.probe_id)
        if slot is None:
            slot = self._slots[request.probe_id] = _Slot(now)
        slot.last_poll = now
        slot.pending = request if slot.pending is None else merge_requests(slot.pending, request)
        self._wake.set()
        if slot.waiter is not None and not slot.waiter.done():
            slot.waiter.set_result(PollReply(known=True, relay=True))  # superseded: caller gave up
        if slot.held:
            commands, slot.held = tuple(slot.held), []
            return PollReply(known=True, commands=commands, interval=self.wait_s, relay=True)
        waiter: asyncio.Future[PollReply] = asyncio.get_running_loop().create_future()
        slot.waiter = waiter
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), timeout=wait_s + 2.0)
        except asyncio.TimeoutError:  # the hub is slow: the request stays pending
            return PollReply(known=True, interval=self.wait_s, relay=True)
        finally:
            if slot.waiter is waiter:
                slot.waiter = None

    async def commands(
        self, asks: Iterable[tuple[Command, Iterable[str]]], deadline_s: float
    ) -> dict[str, list[CommandResult]]:
        """Hand each command to its probes that poll here (at once to a parked poll, else with
        its next one; a probe asked several gets them together) and return their answers in
        by `deadline_s`, by command id. A probe this relay does not know is left out: the
        caller counts it as not answering."""
        now, loop = time.time(), asyncio.get_running_loop()
        per_probe: dict[str, list[Command]] = {}
        gatherings: dict[str, _Gathering] = {}
        for command, probe_ids in asks:
            asked = [p for p in dict.fromkeys(probe_ids) if p in self._slots]
            gathering = _Gathering(set(asked), [], loop.create_future())
            if not asked:
                gathering.done.set_result(None)
            gatherings[command.id] = self._direct[command.id] = gathering
            for probe_id in asked:
                per_probe.setdefault(probe_id, []).append(command)
        try:
            for probe_id, commands in per_probe.items():
                self._give(probe_id, self._slots[probe_id], tuple(commands), now, expect=False)
            if gatherings:
                await asyncio.wait([g.done for g in gatherings.values()], timeout=deadline_s)
        finally:
            for command_id in gatherings:
                self._direct.pop(command_id, None)
        return {command_id: g.answers for command_id, g in gatherings.items()}

    def reply(self, result: CommandResult, command_id: str) -> None:
        """A probe's answer: to the caller of `commands` that waits for it, else sent with the
        node's other answers in one hub call."""
        gathering = self._direct.get(command_id)
        if gathering is not None:
            if result.probe_id in gathering.waiting:
                gathering.waiting.discard(result.probe_id)
                gathering.answers.append(result)
                if not gathering.waiting and not gathering.done.done():
                    gathering.done.set_result(None)
            return
        self._replies.append((result, command_id))
        self._expected.pop((command_id, result.probe_id), None)
        self._answered.set()
        if not self._batch_out:  # the next batched poll carries it, and waits for commands
            self._wake.set()
        elif self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())

    @property
    def probes(self) -> int:
        return len(self._slots)

    # -------------------------------------------------------------- internals
    def _ensure_running(self) -> None:
        if self._runner is None or self._runner.done():
            self._runner = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._replies or self._expected:  # answers to what was just handed ride along
                await self._answers_in()
            entries = self._take_pending()
            results, self._replies = self._replies, []
            if not entries and not results:
                continue
            self._batch_out = True
            endpoint = None if self._endpoint_sent else self._endpoint
            try:
                reply = await self._hub.poll_batch(
                    self.relay_id, entries, self.wait_s * BATCH_WAIT_SHARE, results, endpoint
                )
                self._endpoint_sent = True
            except Exception as exc:  # the hub is away: its probes poll it directly
                self._endpoint_sent = False
                self.failures += 1
                self._fail_flying(entries, exc)
                await asyncio.sleep(1.0)
                continue
            finally:
                self._batch_out = False
            self.batches += 1
            self.deliver(entries, reply)

    def _take_pending(self) -> list[tuple[str, PollRequest]]:
        now = time.time()
        entries = []
        for probe_id, slot in list(self._slots.items()):
            if slot.pending is not None:
                entries.append((probe_id, slot.pending))
                slot.pending, slot.flying = None, slot.waiter
            elif slot.waiter is None and now - slot.last_poll > FORGET_AFTER_S:
                del self._slots[probe_id]
        return entries

    def deliver(self, entries: Iterable[tuple[str, PollRequest]], reply: BatchReply) -> None:
        """Route a batch's answer: every probe whose request it carried gets its reply (with
        the hub's times, one clock sample); commands for another probe wake it, or wait for
        its next poll."""
        self.wait_s = reply.interval or self.wait_s
        now = time.time()
        for probe_id, _ in entries:
            slot = self._slots.get(probe_id)
            if slot is None:
                continue
            known, commands = reply.replies.get(probe_id, (True, ()))
            flying, slot.flying = slot.flying, None
            if slot.waiter is not None and slot.waiter is flying and not slot.waiter.done():
                answer = PollReply(known, commands, reply.hub_received, reply.hub_replied,
                                   reply.interval, relay=reply.relay,
                                   stop=reply.stop.get(probe_id, ""))  # fmt: skip
                due = slot.last_poll + self.wait_s - now
                if known and not commands and not answer.stop and due > 0:
                    self._answer_later(slot.waiter, answer, due)  # one heartbeat an interval
                else:
                    slot.waiter.set_result(answer)
                self._handed(probe_id, commands, now)
            elif not known:
                slot.held.clear()
            else:
                self._give(probe_id, slot, commands, now)
        carried = {probe_id for probe_id, _ in entries}
        for probe_id, (known, commands) in reply.replies.items():
            slot = self._slots.get(probe_id)
            if probe_id in carried or slot is None or not known:
                continue
            self._give(probe_id, slot, commands, now)

    def _answer_later(
        self, waiter: asyncio.Future[PollReply], answer: PollReply, due: float
    ) -> None:
        """Answer a parked poll with nothing to do when its interval is up, not when the batch
        (which waits half an interval) returns: a probe heartbeats once an interval, as it
        does polling the hub. Commands that come meanwhile answer it at once (`_give`). The
        hub's reply time moves on by the time held here (this node's clock, the probe's too),
        so the probe's clock sample sees the hold as the hub's, not as round trip."""
        held_from = time.time()

        def answer_now() -> None:
            if not waiter.done():
                late = time.time() - held_from
                hub_replied = None if answer.hub_replied is None else answer.hub_replied + late
                waiter.set_result(replace(answer, hub_replied=hub_replied))

        asyncio.get_running_loop().call_later(due, answer_now)

    def _give(
        self,
        probe_id: str,
        slot: _Slot,
        commands: tuple[Command, ...],
        now: float,
        *,
        expect: bool = True,
    ) -> None:
        """Commands to a probe: at once when its poll is parked, else with its next. Their
        answers are `expect`ed back before the next batched poll goes (they ride on it)."""
        if not commands:
            return
        if slot.waiter is not None and not slot.waiter.done():
            slot.waiter.set_result(PollReply(True, commands, interval=self.wait_s, relay=True))
        else:
            slot.held = [*slot.held, *commands][-HELD_COMMANDS:]
        if expect:
            self._handed(probe_id, commands, now)

    def _handed(self, probe_id: str, commands: tuple[Command, ...], now: float) -> None:
        for command in commands:
            self._expected[command.id, probe_id] = now

    def _fail_flying(self, entries: list[tuple[str, PollRequest]], exc: Exception) -> None:
        for probe_id, _ in entries:
            slot = self._slots.get(probe_id)
            if slot is None:
                continue
            flying, slot.flying = slot.flying, None
            if flying is not None and flying is slot.waiter and not flying.done():
                flying.set_exception(exc)

    async def _answers_in(self) -> None:
        """Wait until every command handed out is answered, or for the linger at most."""
        deadline = time.monotonic() + self._linger_s
        while self._expected and time.monotonic() < deadline:
            self._answered.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._answered.wait(), deadline - time.monotonic())
        stale = time.time() - 10 * self._linger_s - 10.0
        self._expected = {c: t for c, t in self._expected.items() if t > stale}

    async def _flush(self) -> None:
        """Send in the replies that came while a batched poll waits at the hub: once every
        command handed out is answered, or after the linger (unless a batched poll took them
        meanwhile); a reply that comes while this call is out goes with the next."""
        while self._replies:
            await self._answers_in()
            batch, self._replies = self._replies, []
            if not batch:
                break
            try:
                await self._hub.reply_batch(batch)
                self.reply_batches += 1
            except Exception:  # the hub is away: these answers are late anyway
                self.failures += 1
