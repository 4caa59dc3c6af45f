"""The hub's side of node relays (`runtime.relay`): which probes poll through which relay, one
wakeup per relay for all of its probes' mailboxes, and how the CLI reaches each relay."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rankscope.runtime.protocol import Command, FanOutRoutes, ProbeState, RelayRoute

__all__ = ["COMMANDS_TOGETHER_S", "HubRelays"]

COMMANDS_TOGETHER_S = 0.01
"""A relay's batched poll, woken by a command, waits this long for more: the fan-outs a CLI
starts together through the hub then reach the node in one batch, not one each."""


@dataclass
class _HubRelay:
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    members: dict[str, Any] = field(default_factory=dict)
    """probe id -> its `registry.ProbeRecord`."""


class HubRelays:
    """The hub's side: which probes poll through which relay, one wakeup per relay that every
    member's mailbox sets when a command is posted to it, and how the CLI reaches each relay."""

    def __init__(self) -> None:
        self._relays: dict[str, _HubRelay] = {}
        self._endpoints: dict[str, Any] = {}
        """relay id -> what its `commands` is called on; one per node ever seen (a relay that
        comes back under its node's id sends its new one)."""

    def set_endpoint(self, relay_id: str, endpoint: Any) -> None:
        self._endpoints[relay_id] = endpoint

    def routes(self, records: Iterable[Any], deadline_s: float) -> FanOutRoutes:
        """Split a fan-out's probes: those polling through a relay the CLI can reach go by
        their relay, the others through the hub."""
        direct: list[str] = []
        by_relay: dict[str, list[str]] = {}
        for record in records:
            probe_id = record.info.probe_id
            if record.relay is not None and record.relay in self._endpoints:
                by_relay.setdefault(record.relay, []).append(probe_id)
            else:
                direct.append(probe_id)
        relayed = tuple(
            RelayRoute(self._endpoints[relay_id], relay_id, tuple(ids))
            for relay_id, ids in by_relay.items()
        )
        return FanOutRoutes(tuple(direct), relayed, deadline_s)

    def join(self, relay_id: str, record: Any) -> None:
        """`record` polls through `relay_id` now (it may have come from another)."""
        if record.relay == relay_id:
            return
        self.leave(record)
        relay = self._relays.setdefault(relay_id, _HubRelay())
        relay.members[record.info.probe_id] = record
        record.relay, record.mailbox.also_wake = relay_id, relay.wakeup

    def leave(self, record: Any) -> None:
        """`record` polls the hub directly again (its relay died or was not wanted)."""
        if record.relay is None:
            return
        relay = self._relays.get(record.relay)
        if relay is not None:
            relay.members.pop(record.info.probe_id, None)
            if not relay.members:
                del self._relays[record.relay]
        record.relay, record.mailbox.also_wake = None, None

    async def wait(self, relay_id: str, timeout: float) -> None:
        """Return at once when a member has commands waiting, else when one is posted or
        after `timeout`."""
        relay = self._relays.get(relay_id)
        if relay is None:
            await asyncio.sleep(timeout)
            return
        if any(r.mailbox.commands for r in relay.members.values()):
            return
        relay.wakeup.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(relay.wakeup.wait(), timeout=timeout)
            await asyncio.sleep(COMMANDS_TOGETHER_S)

    def prune(self) -> None:
        """Drop members the hub holds dead: a relayed probe that died never polls the hub
        directly again (which is what `leave`s it), so the reaper prunes it here."""
        for relay_id, relay in list(self._relays.items()):
            for probe_id, record in list(relay.members.items()):
                if record.state == ProbeState.DEAD:
                    del relay.members[probe_id]
                    record.relay, record.mailbox.also_wake = None, None
            if not relay.members:
                del self._relays[relay_id]

    def take(self, relay_id: str) -> dict[str, tuple[Command, ...]]:
        """Every member's waiting commands, by probe id; their mailboxes are empty afterwards."""
        relay = self._relays.get(relay_id)
        if relay is None:
            return {}
        return {p: r.mailbox.take() for p, r in relay.members.items() if r.mailbox.commands}
