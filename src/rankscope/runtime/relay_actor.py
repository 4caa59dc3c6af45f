"""The node relay as a Ray actor, and the probe's side: which way its heartbeat goes.

One relay per node (named after the node, pinned to it, `num_cpus=0`), created on first use by
the first probe of the node that wants it (`get_if_exists`, so probes racing to create it get
the same one). It is owned by that probe's process: when the process ends, the relay goes, and
the node's other probes poll the hub directly until they create the next. The hub decides when
relays are worth it (`PollReply.relay`: more than `Config.relay_above` live probes).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rankscope._version import __version__
from rankscope.config import Config, hub_namespace
from rankscope.runtime.protocol import BatchReply, Command, CommandResult, PollReply, PollRequest
from rankscope.runtime.relay import RelayCore

__all__ = ["RELAY_RETRY_S", "Relay", "RelayLink", "relay_name"]

log = logging.getLogger("rankscope")

RELAY_RETRY_S = 30.0
"""After its relay failed (could not start, died), a probe polls the hub directly this long."""
RELAY_START_S = 60.0
"""A relay not up after this long (a new worker process on a busy node) counts as failed."""


def relay_name(node_id: str) -> str:
    return f"rankscope_relay_{node_id}"


class _HubHandle:
    """The hub as a relay calls it: found by name (never created), again after a failure."""

    def __init__(self) -> None:
        self._handle: Any = None

    def _hub(self) -> Any:
        if self._handle is None:
            from rankscope.runtime.hub import find_hub

            self._handle = find_hub()
            if self._handle is None:
                raise RuntimeError("no rankscope hub")
        return self._handle

    async def poll_batch(
        self,
        relay_id: str,
        entries: list[tuple[str, PollRequest]],
        wait_s: float,
        results: list[tuple[CommandResult, str]],
        endpoint: Any,
    ) -> BatchReply:
        try:
            reply: BatchReply = await self._hub().poll_batch.remote(
                relay_id, entries, wait_s, results, endpoint
            )
        except Exception:
            self._handle = None
            raise
        return reply

    async def reply_batch(self, results: list[tuple[CommandResult, str]]) -> None:
        try:
            await self._hub().reply_batch.remote(results)
        except Exception:
            self._handle = None
            raise


class Relay:
    """The actor: `RelayCore` with the hub behind it, and the CLI's fan-outs to its probes."""

    def __init__(self, relay_id: str) -> None:
        this = ray.get_runtime_context().current_actor
        self._core = RelayCore(relay_id, _HubHandle(), endpoint=this)

    async def commands(
        self, relay_id: str, asks: list[tuple[Command, tuple[str, ...]]], deadline_s: float
    ) -> dict[str, list[CommandResult]]:
        """The fan-outs' commands for these of this node's probes (`RelayCore.commands`)."""
        if relay_id != self._core.relay_id:
            return {}
        return await self._core.commands(asks, deadline_s)

    @ray.method(enable_task_events=False)
    async def poll(self, request: PollRequest, wait_s: float) -> PollReply:
        """A probe's heartbeat: no task event per beat (Ray's threads pay for each, and the
        dashboard's task list would fill with them)."""
        return await self._core.poll(request, wait_s)

    async def reply(self, result: CommandResult, command_id: str) -> None:
        self._core.reply(result, command_id)

    async def ping(self) -> str:
        return __version__

    async def probes(self) -> int:
        """The probes polling through this relay (forgotten after 10 min of silence)."""
        return self._core.probes


RelayActor = ray.remote(Relay)


def get_or_create_relay(node_id: str) -> Any:
    """This node's relay, started if missing; safe when the node's probes race to create it."""
    return RelayActor.options(
        name=relay_name(node_id),
        namespace=hub_namespace(),
        get_if_exists=True,
        num_cpus=0,
        max_restarts=0,
        max_concurrency=1000,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        runtime_env={"env_vars": {"RANKSCOPE_ROLE": "relay"}},
    ).remote(relay_name(node_id))


class RelayLink:
    """A probe's way to the hub: through its node's relay while the hub asks for relays (or
    the probe's own `relay_above` is 0), else directly; a relay that fails is dropped at once,
    the same heartbeat goes to the hub directly, and the relay is tried again after
    RELAY_RETRY_S (so its death costs the probe no heartbeat, and the hub no liveness)."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self._wanted = config.relay_above == 0
        self._relay: Any = None
        self._starting: Any = None
        """The relay's first `ping`, while it starts: the hub is polled directly meanwhile, so
        a relay's start (seconds for a new worker process) never holds a heartbeat back."""
        self._started_at = 0.0
        self._failed_at = float("-inf")
        self.via_relay = False
        """Whether the last poll went through the relay (its commands' replies go back so)."""

    def poll(self, hub: Any, node_id: str, request: PollRequest, wait_s: float) -> PollReply:
        """One heartbeat; raises only when the hub itself cannot be reached."""
        timeout = wait_s + self._config.command_deadline + 5.0
        relay = self._usable(node_id)
        if relay is not None:
            try:
                reply: PollReply = ray.get(relay.poll.remote(request, wait_s), timeout=timeout)
                self.via_relay = True
                return reply
            except Exception as exc:
                self._fail(exc)
        self.via_relay = False
        direct: PollReply = ray.get(hub.poll.remote(request, wait_s), timeout=timeout)
        return direct

    def reply(self, hub: Any, result: CommandResult, command_id: str) -> None:
        """Answer a command the way it came."""
        if self.via_relay and self._relay is not None:
            self._relay.reply.remote(result, command_id)
        else:
            hub.reply.remote(result, command_id)

    def asked(self, reply: PollReply) -> None:
        """The hub's wish for relays, unless this probe's own setting forces it."""
        own = self._config.relay_above
        self._wanted = own == 0 or (own > 0 and reply.relay)
        if not self._wanted:
            self._relay = None

    def _usable(self, node_id: str) -> Any:
        if not self._wanted or not node_id:
            return None
        if time.monotonic() - self._failed_at < RELAY_RETRY_S:
            return None
        if self._relay is None:
            try:
                self._relay = get_or_create_relay(node_id)
                self._starting, self._started_at = self._relay.ping.remote(), time.monotonic()
            except Exception as exc:
                return self._fail(exc)
        if self._starting is not None:
            ready, _ = ray.wait([self._starting], timeout=0)
            if not ready:
                late = time.monotonic() - self._started_at > RELAY_START_S
                return self._fail(TimeoutError("the relay did not start")) if late else None
            try:
                ray.get(self._starting)
            except Exception as exc:
                return self._fail(exc)
            self._starting = None
        return self._relay

    def _fail(self, exc: Exception) -> None:
        log.debug("rankscope probe: the node's relay is not usable (%s)", exc)
        self._relay, self._starting, self._failed_at = None, None, time.monotonic()
