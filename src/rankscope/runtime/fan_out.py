"""Sending the CLI's fan-outs: through the hub for probes that poll it, straight to the node
relays for the rest (issue 20).

Fan-outs started together (`HubClient.together`) go out as one: one `Hub.fan_out_routes` call
for all of them and one call per relay carrying every command, so a probe gets them in one poll
and a node's answers come back in one reply. At 4,096 ranks `hang` starts three fan-outs
(`collectives`, `stacks`, `children`): one call per relay instead of three saves the CLI ~1,000
actor calls a look.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rankscope.runtime.protocol import (
    Command,
    CommandResult,
    FanOutResult,
    FanOutRoutes,
    ProbeStatus,
    RelayRoute,
)

__all__ = ["RELAY_CALL_MARGIN_S", "Ask", "send_together"]

log = logging.getLogger("rankscope")

RELAY_CALL_MARGIN_S = 2.0
"""A relay answers by the fan-out's deadline; this much later it counts as not answering."""


@dataclass
class Ask:
    """One fan-out: `kind` with `args` to `probes`; `result` is set once it is sent."""

    kind: str
    args: dict[str, Any] | None
    probes: list[ProbeStatus]
    deadline_s: float | None
    result: Callable[[], FanOutResult] | None = None


@dataclass
class _RelayAnswers:
    """Every relay's answers to the fan-outs sent together, waited for once."""

    routes: tuple[RelayRoute, ...]
    refs: list[Any]
    timeout_s: float
    relayed: set[str]
    """Probe ids asked through a relay."""
    by_command: dict[str, list[CommandResult]] | None = None

    def answers(self, command_id: str) -> list[CommandResult]:
        if self.by_command is None:
            self.by_command = _gather(self.routes, self.refs, self.timeout_s)
        return self.by_command.get(command_id, [])


def send_together(
    hub: Any, asks: list[Ask], get: Callable[[Any, float], Any], hub_wait_s: float
) -> None:
    """Send `asks` together and set each one's `result`. `get(ref, timeout_s)` reads a hub
    call's answer (`HubClient._get`: one clear line when the hub is gone); a hub fan-out may
    take `hub_wait_s` more than its deadline."""
    ids = list(dict.fromkeys(p.info.probe_id for ask in asks for p in ask.probes))
    if any(p.relay for ask in asks for p in ask.probes):
        routes: FanOutRoutes = get(hub.fan_out_routes.remote(probe_ids=ids), hub_wait_s)
    else:
        routes = FanOutRoutes(tuple(ids), (), 0.0)
    direct = set(routes.direct)
    commands = [Command(uuid.uuid4().hex, ask.kind, dict(ask.args or {})) for ask in asks]
    deadline = max(routes.deadline_s if a.deadline_s is None else a.deadline_s for a in asks)
    asked = [{p.info.probe_id for p in ask.probes} for ask in asks]
    refs = []
    for route in routes.relayed:
        batch = [
            (command, tuple(p for p in route.probe_ids if p in wanted))
            for command, wanted in zip(commands, asked, strict=True)
        ]
        batch = [(command, probe_ids) for command, probe_ids in batch if probe_ids]
        refs.append(route.endpoint.commands.remote(route.relay_id, batch, deadline))
    relayed = {p for route in routes.relayed for p in route.probe_ids}
    relays = _RelayAnswers(routes.relayed, refs, deadline + RELAY_CALL_MARGIN_S, relayed)
    for ask, command in zip(asks, commands, strict=True):
        mine = [p.info.probe_id for p in ask.probes if p.info.probe_id in direct]
        ref = None
        if mine:
            ref = hub.fan_out.remote(ask.kind, ask.args, probe_ids=mine, deadline_s=ask.deadline_s)
        timeout_s = hub_wait_s + (ask.deadline_s or 0.0)
        ask.result = _reader(ask.probes, command, ref, relays, get, timeout_s)


def _reader(
    probes: list[ProbeStatus],
    command: Command,
    ref: Any,
    relays: _RelayAnswers,
    get: Callable[[Any, float], Any],
    timeout_s: float,
) -> Callable[[], FanOutResult]:
    """The fan-out's result, read once asked for. It holds no reference to its `Ask`: a cycle
    would keep its object refs alive until a full collection, which may come after Ray's
    shutdown (freeing a ref then can crash the process)."""

    def result() -> FanOutResult:
        through_hub = FanOutResult((), ())
        if ref is not None:
            through_hub = get(ref, timeout_s)
        answers = relays.answers(command.id)
        answered = {r.probe_id for r in answers}
        missing = tuple(
            p
            for p in probes
            if p.info.probe_id in relays.relayed and p.info.probe_id not in answered
        )
        return FanOutResult(through_hub.replies + tuple(answers), through_hub.missing + missing)

    return result


def _gather(
    routes: tuple[RelayRoute, ...], refs: list[Any], timeout_s: float
) -> dict[str, list[CommandResult]]:
    """The relays' answers within `timeout_s`, by command id; a relay that failed or is late
    (dead, its node gone) answers nothing, and its probes count as not answering."""
    import ray

    by_command: dict[str, list[CommandResult]] = {}
    if not refs:
        return by_command
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    done = set(ready)
    for route, ref in zip(routes, refs, strict=True):
        if ref not in done:
            continue
        try:
            answered: dict[str, list[CommandResult]] = ray.get(ref)
        except Exception as exc:
            log.debug("rankscope: relay %s did not answer: %s", route.relay_id, exc)
            continue
        for command_id, results in answered.items():
            by_command.setdefault(command_id, []).extend(results)
    return by_command
