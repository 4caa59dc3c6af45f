"""The hub's heartbeat load, and the interval that keeps it bounded (issue 20).

Every heartbeat is one Ray actor call into the one hub process; each costs the hub about
`HUB_CPU_PER_HEARTBEAT_S` of CPU, about what a bare async actor call costs
(`benchmarks/bench_scale.py` measures both; docs/PERFORMANCE.md, Scale). At N live probes
and an interval of T seconds the hub spends N x c / T cores on heartbeats alone: 4,096 probes at
1 s need ~6 cores, and the calls it cannot take queue up, so every command answers late.

So the hub tells each probe, in its poll reply, the interval to use: the configured one, or
longer once the live probes would take more than `HEARTBEAT_CORE_SHARE` of a core
(interval >= N x c / share = N / 333 s at 1.5 ms), with c measured live (`HeartbeatCost`).
A long poll still returns at once with a command, so
the interval delays nothing a user asks for; it spaces the heartbeats (progress, summaries,
events) out. The liveness deadline grows in the same proportion (`dead_after_for`): a probe
parked in a 12 s long poll is not silent.

Pure: no Ray, so the rule reads and is tested without a cluster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "HEARTBEAT_CORE_SHARE",
    "HUB_CPU_PER_HEARTBEAT_S",
    "MAX_HEARTBEAT_S",
    "HeartbeatCost",
    "dead_after_for",
    "heartbeat_interval",
]

HUB_CPU_PER_HEARTBEAT_S = 1.5e-3
"""Hub CPU per heartbeat (one poll call), seconds, until the hub has measured it itself
(`HeartbeatCost`): the one place this cost is stated."""
HEARTBEAT_CORE_SHARE = 0.5
"""The share of one core the hub's heartbeats may take; the rest is for commands."""
MAX_HEARTBEAT_S = 60.0
"""No probe is asked to wait longer than this (past ~20,000 probes the load grows again)."""
STEP_S = 0.25
"""Intervals are whole quarter seconds, so a probe count that wobbles does not move them."""


def heartbeat_interval(
    live: int, configured: float, cost: float = HUB_CPU_PER_HEARTBEAT_S
) -> float:
    """The interval the hub asks of every probe when `live` probes heartbeat at `cost` CPU
    seconds each: `configured` until they would take over HEARTBEAT_CORE_SHARE of a core, then
    N x cost / share, rounded up to a quarter second, at most MAX_HEARTBEAT_S (never below
    `configured`)."""
    need = live * cost / HEARTBEAT_CORE_SHARE
    if need <= configured:
        return configured
    return max(configured, min(MAX_HEARTBEAT_S, math.ceil(need / STEP_S) * STEP_S))


MIN_SAMPLE_BEATS = 200
"""Heartbeats between two live measurements of their cost (`HeartbeatCost`)."""
COST_BOUNDS_S = (0.3e-3, 10e-3)
MEASURED_ABOVE = 256
"""Live probes past which the measured cost is used (`HeartbeatCost.for_probes`)."""
SMOOTHING = 0.2


@dataclass
class HeartbeatCost:
    """The hub's CPU per heartbeat, measured live: its process CPU time over the heartbeats it
    took (direct polls and those a relay batched), clamped and smoothed, from
    HUB_CPU_PER_HEARTBEAT_S on. The machine, the payload and the relays move it (relayed
    heartbeats cost less, a big registry's sweeps more; docs/PERFORMANCE.md, Scale); commands
    meanwhile count in, which errs on the long side."""

    cost: float = HUB_CPU_PER_HEARTBEAT_S
    _cpu: float | None = None
    _beats: int = 0

    def for_probes(self, live: int) -> float:
        """The cost the interval rule uses: the measured one past MEASURED_ABOVE live probes;
        below, the hub's fixed work (sweeps, the event writer) would pass for heartbeat cost
        and the stated one is used (the interval stays the configured one there)."""
        return self.cost if live > MEASURED_ABOVE else HUB_CPU_PER_HEARTBEAT_S

    def sample(self, cpu: float, beats: int) -> float:
        """`cpu`: the process's CPU seconds so far; `beats`: heartbeats taken so far."""
        if self._cpu is None or beats < self._beats:
            self._cpu, self._beats = cpu, beats
        elif beats - self._beats >= MIN_SAMPLE_BEATS:
            per = (cpu - self._cpu) / (beats - self._beats)
            per = min(COST_BOUNDS_S[1], max(COST_BOUNDS_S[0], per))
            self.cost = (1 - SMOOTHING) * self.cost + SMOOTHING * per
            self._cpu, self._beats = cpu, beats
        return self.cost


def dead_after_for(interval: float, configured: float, dead_after: float) -> float:
    """The silence after which a probe told to heartbeat every `interval` s is checked:
    `dead_after` scaled by how much longer than the `configured` interval it is."""
    if configured <= 0 or interval <= configured:
        return dead_after
    return dead_after * interval / configured
