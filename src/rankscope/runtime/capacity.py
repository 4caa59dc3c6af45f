"""The hub's heartbeat load, and the interval that keeps it bounded (issue 20).

Every heartbeat is one Ray actor call into the one hub process; each costs the hub about
`HUB_CPU_PER_HEARTBEAT_S` of CPU (measured with `benchmarks/bench_scale.py` on the 2-core
development machine: 1.2-2.3 ms, ~1.5 ms typical; a bare async actor ~1.6 ms). At N live probes
and an interval of T seconds the hub spends N x c / T cores on heartbeats alone: 4,096 probes at
1 s need ~6 cores, and the calls it cannot take queue up, so every command answers late.

So the hub tells each probe, in its poll reply, the interval to use: the configured one, or
longer once the live probes would take more than `HEARTBEAT_CORE_SHARE` of a core
(interval >= N x c / share = N / 333 s). A long poll still returns at once with a command, so
the interval delays nothing a user asks for; it spaces the heartbeats (progress, summaries,
events) out. The liveness deadline grows in the same proportion (`dead_after_for`): a probe
parked in a 12 s long poll is not silent.

Pure: no Ray, so the rule reads and is tested without a cluster.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = [
    "HEARTBEAT_CORE_SHARE",
    "HUB_CPU_PER_HEARTBEAT_S",
    "MAX_HEARTBEAT_S",
    "RELAY_CALLS_PER_INTERVAL",
    "callers_per_interval",
    "dead_after_for",
    "heartbeat_interval",
]

HUB_CPU_PER_HEARTBEAT_S = 1.5e-3
"""Hub CPU per heartbeat (one poll call), seconds: the one place this cost is stated."""
HEARTBEAT_CORE_SHARE = 0.5
"""The share of one core the hub's heartbeats may take; the rest is for commands."""
MAX_HEARTBEAT_S = 60.0
"""No probe is asked to wait longer than this (past ~20,000 probes the load grows again)."""
STEP_S = 0.25
"""Intervals are whole quarter seconds, so a probe count that wobbles does not move them."""


def heartbeat_interval(live: int, configured: float) -> float:
    """The interval the hub asks of every probe when `live` probes heartbeat: `configured`
    until they would take over HEARTBEAT_CORE_SHARE of a core, then N x c / share, rounded up
    to a quarter second, at most MAX_HEARTBEAT_S (never below `configured`)."""
    need = live * HUB_CPU_PER_HEARTBEAT_S / HEARTBEAT_CORE_SHARE
    if need <= configured:
        return configured
    return max(configured, min(MAX_HEARTBEAT_S, math.ceil(need / STEP_S) * STEP_S))


RELAY_CALLS_PER_INTERVAL = 3
"""A node relay's cost to the hub per interval, in heartbeats: two batched polls (each waits half
the interval, `relay.BATCH_WAIT_SHARE`), each dearer than one probe's poll (its 8 heartbeats)."""


def callers_per_interval(live: int, relayed: int, relay_sizes: Iterable[int]) -> int:
    """The heartbeat load, in probe heartbeats per interval: the probes that poll the hub
    directly, and for each relay (of so many probes) RELAY_CALLS_PER_INTERVAL at most."""
    return max(0, live - relayed) + sum(min(n, RELAY_CALLS_PER_INTERVAL) for n in relay_sizes)


def dead_after_for(interval: float, configured: float, dead_after: float) -> float:
    """The silence after which a probe told to heartbeat every `interval` s is checked:
    `dead_after` scaled by how much longer than the `configured` interval it is."""
    if configured <= 0 or interval <= configured:
        return dead_after
    return dead_after * interval / configured
