"""Per-probe command mailboxes, and the replies a fan-out waits for.

Probes long-poll the hub, so a command cannot be pushed to a probe: it waits in that probe's
mailbox until the next poll takes it. Each mailbox is bounded, so a probe that stopped polling
cannot grow the hub without limit: the oldest command goes, and is counted. A fan-out posts one
command (one id, one object) to every probe it asks and waits on one future per probe; the
probe's reply resolves it, and a reply that comes after the deadline finds nothing left to
resolve and is ignored. One object, not one per probe: a relay's batched poll then carries it
once for the node (pickle keeps one copy), and the hub draws no random id per probe.

No Ray here: the actor owns the event loop and the remote methods; these are the data it keeps,
readable (and testable) without a cluster.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rankscope.runtime.protocol import Command, CommandResult

__all__ = ["Mailbox", "PendingReplies"]


@dataclass
class Mailbox:
    """The commands waiting for one probe's next poll, at most `capacity` of them."""

    capacity: int
    commands: collections.deque[Command] = field(default_factory=collections.deque)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when a command is posted, so a poll waiting on an empty mailbox returns at once."""
    dropped: int = 0
    """Commands pushed out, oldest first, because the probe did not poll them in time."""
    also_wake: asyncio.Event | None = None
    """Set too when a command is posted: the batched poll of the relay this probe polls
    through (`hub_relays.HubRelays`) waits on it for all of its node's probes at once."""

    def post(self, command: Command) -> None:
        """Queue `command`, dropping (and counting) the oldest when the mailbox is full."""
        if len(self.commands) >= self.capacity:
            self.commands.popleft()
            self.dropped += 1
        self.commands.append(command)
        self.wakeup.set()
        if self.also_wake is not None:
            self.also_wake.set()

    async def wait(self, timeout: float) -> None:
        """Return at once when commands wait, else when one is posted or after `timeout`."""
        if not self.commands:
            self.wakeup.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.wakeup.wait(), timeout=timeout)

    def take(self) -> tuple[Command, ...]:
        """Every waiting command, oldest first; the mailbox is empty afterwards."""
        commands = tuple(self.commands)
        self.commands.clear()
        return commands


class PendingReplies:
    """The futures of commands posted and not yet answered, keyed by (command id, probe id)."""

    def __init__(self) -> None:
        self._futures: dict[tuple[str, str], asyncio.Future[CommandResult]] = {}

    def resolve(self, command_id: str, result: CommandResult) -> None:
        """A probe's answer; ignored when nobody waits for it any more (past the deadline)."""
        future = self._futures.get((command_id, result.probe_id))
        if future is not None and not future.done():
            future.set_result(result)

    def give_up_on(self, probe_id: str) -> None:
        """A probe proven dead answers nothing: its questions end now, unanswered, and a
        fan-out waits only for the others (not out its deadline)."""
        for (_, asked), future in self._futures.items():
            if asked == probe_id and not future.done():
                future.cancel()

    async def ask(
        self,
        targets: Sequence[tuple[str, Mailbox]],
        kind: str,
        args: dict[str, Any] | None,
        deadline: float,
    ) -> dict[str, CommandResult]:
        """Post one `kind` command to each (probe id, mailbox); the replies in by `deadline`.

        The answers come keyed by probe id, in the order of `targets`; a probe missing from
        them did not answer in time. Nothing is kept once this returns.
        """
        futures: dict[str, asyncio.Future[CommandResult]] = {}
        loop = asyncio.get_running_loop()
        command = Command(id=uuid.uuid4().hex, kind=kind, args=dict(args or {}))
        for probe_id, mailbox in targets:
            mailbox.post(command)
            futures[probe_id] = self._futures[command.id, probe_id] = loop.create_future()
        try:
            if futures:
                await asyncio.wait(futures.values(), timeout=deadline)
        finally:
            for probe_id in futures:
                self._futures.pop((command.id, probe_id), None)
        return {
            probe_id: f.result()
            for probe_id, f in futures.items()
            if f.done() and not f.cancelled()
        }
