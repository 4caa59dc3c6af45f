"""A death raised as an alert by the hub, the one process that outlives the job's ranks.

A SIGKILL, an OOM kill or a lost node ends a rank with no word of its own, and its job's driver
or controller usually tears the other ranks down within a second, before any rank can judge.
The hub marks the rank dead (its process proven gone, or its node declared dead by Ray) and
calls `death_alert` (`runtime.hub_hooks`): the first death of a group becomes one `death`
alert naming the rank, its pid, node and why; the ranks that follow it within FOLLOWERS_S are
its consequences and raise none. Ray's pool workers (no rank, no actor) raise nothing. The
webhook is the one the hub was started with (RANKSCOPE_ALERT_WEBHOOK in the environment of
the job that started it). An actor Ray says its owner's death or `ray.kill` ended (the job
ended, a controller tore the group down) raises nothing.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from rankscope.alerts.io_webhook import WebhookSender
from rankscope.alerts.model import Alert, AlertSettings
from rankscope.config import Config
from rankscope.hang.io_death import ray_death
from rankscope.hang.model import DeathKind
from rankscope.runtime.hub_hooks import register_death_hook
from rankscope.runtime.protocol import ProbeState, ProbeStatus

__all__ = ["FOLLOWERS_S", "death_alert", "first_death_alert"]

FOLLOWERS_S = 60.0
"""A rank of the group that died this soon after another one followed it (a torn-down group)."""
SAME_MOMENT_S = 0.5
"""Ranks last heard within this of each other died together: each is told (a node lost)."""
SILENT_HEARTBEATS = 2.5
"""A rank the hub still holds alive, last heard before the dead one and silent now for this
many heartbeats, went first: it is the one to name. A SIGKILL-ed rank's peers fail or are
torn down a second or two later, and the hub may prove one of them dead before the silent one's
liveness check ends."""
_webhook = WebhookSender()
_named: collections.deque[str] = collections.deque(maxlen=4096)
"""The processes an alert named (a silent one is named at its first peer's death, before the
hub proves it dead): each is named once."""


def _went_first(peer: ProbeStatus, dead: ProbeStatus, now: float, silent_s: float) -> bool:
    """Whether `peer` went before `dead`: last heard before it, and marked, or silent now for
    longer than a late heartbeat explains. The hub marks a rank dead only after `dead_after`
    of silence, so a peer killed a second before it is silent by then, whatever order the
    liveness checks finished in."""
    if not dead.last_seen - FOLLOWERS_S <= peer.last_seen < dead.last_seen - SAME_MOMENT_S:
        return False
    return peer.state != ProbeState.ALIVE or now - peer.last_seen > silent_s


def first_death_alert(
    dead: ProbeStatus, job: Sequence[ProbeStatus], now: float, heartbeat_s: float = 1.0
) -> Alert | None:
    """The alert for `dead`, when it is the first of its group to die (pure); `heartbeat_s`
    is the probes' heartbeat interval."""
    ctx = dead.context
    silent_s = SILENT_HEARTBEATS * heartbeat_s
    if ctx.rank is None and not ctx.actor_class:
        return None  # one of Ray's pool workers: no part of the job
    earlier = [  # silent longer than it: it went first, whether the hub marked it yet or not
        p
        for p in job
        if p.info.probe_id != dead.info.probe_id
        and (p.context.group or "") == (ctx.group or "")
        and (p.context.rank is not None or p.context.actor_class)
        and _went_first(p, dead, now, silent_s)
    ]
    if any(p.state == ProbeState.DEAD for p in earlier):
        return None  # it followed another death: that one was raised
    if earlier:  # silent before it, not yet proven dead (a lost node): name that one now
        gone = min(earlier, key=lambda p: p.last_seen)
        why = (
            f"no heartbeat for {dead.last_seen - gone.last_seen:.0f} s before {_who(dead)} "
            "died: its process or its node is gone"
        )
        return _alert(gone, "went silent", why, now)
    return _alert(dead, "died", dead.reason or "its process is gone", now)


def _who(p: ProbeStatus) -> str:
    ctx = p.context
    return f"rank {ctx.rank}" if ctx.rank is not None else f"actor {ctx.actor_class}"


def _alert(p: ProbeStatus, what: str, why: str, now: float) -> Alert:
    ctx = p.context
    return Alert(
        rule="death",
        severity="critical",
        message=(
            f"{_who(p)} {what} (pid {ctx.pid} on {ctx.node_ip or ctx.hostname}): {why}; "
            "`rankscope report` says what followed"
        )[:240],
        time=now,
        rank=ctx.rank,
        pid=ctx.pid,
        group=ctx.group,
        job_id=ctx.job_id or "",
    )


@register_death_hook
def death_alert(dead: ProbeStatus, job: Sequence[ProbeStatus]) -> list[tuple[str, dict[str, Any]]]:
    """In the hub: the `alert` event for a first death, and its POST to the webhook."""
    if dead.info.probe_id in _named or _ended_from_outside(dead):
        return []
    alert = first_death_alert(dead, job, time.time(), Config.from_env().heartbeat_interval)
    if alert is None:
        return []
    _named.extend(
        p.info.probe_id for p in job if (p.context.pid, p.context.group) == (alert.pid, alert.group)
    )
    payload = dataclasses.asdict(alert)
    try:
        url = AlertSettings.from_env().webhook
    except Exception:  # a bad setting: the alerts feature reports it where it is set
        url = ""
    if url:
        _webhook.send(url, payload)
    return [("alert", payload)]


def _ended_from_outside(dead: ProbeStatus) -> bool:
    """Ray says the actor was ended by its owner's death or by `ray.kill`: its job or its
    controller ended it (a normal job end, a group torn down), which is no death to raise. A
    lost node is never that, though Ray may record its owner's death first (the driver ended
    while the node's health checks were failing)."""
    if not dead.context.actor_id or dead.reason.startswith("node gone"):
        return False
    kind, _, _ = ray_death(dead.context.actor_id)
    return kind in (DeathKind.KILLED, DeathKind.OWNER_DIED)
