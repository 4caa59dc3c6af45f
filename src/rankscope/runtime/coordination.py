"""The hub's side of ranks coordinating through it: exchanges (all-gathers) and claims.

Processes that share no torch.distributed group (trainer and rollout actors in RL jobs) meet
at the hub instead: an exchange gathers one payload per participant under a key, and a claim
lets the first caller per (job, key) do something once, e.g. write one report instead of one
per rank. The worker-side API is `runtime.rendezvous.exchange()`.

No Ray here: the actor forwards its remote calls; the state and the waiting live in these
classes, which run on any asyncio loop.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from dataclasses import dataclass, field
from typing import Any

from rankscope.runtime.protocol import ExchangeResult

__all__ = ["MAX_RENDEZVOUS", "Claims", "Exchanges", "Rendezvous"]

MAX_RENDEZVOUS = 1_000
"""Open rendezvous kept at once; the oldest is dropped (its waiters get what arrived)."""


@dataclass
class Rendezvous:
    """One open exchange: who is expected, what arrived, and how many have read the result."""

    expected: frozenset[int]
    payloads: dict[int, Any] = field(default_factory=dict)
    complete: asyncio.Event = field(default_factory=asyncio.Event)
    readers: int = 0


class Exchanges:
    """Open rendezvous by key, at most `limit` of them; each is gone once all who came read it."""

    def __init__(self, limit: int = MAX_RENDEZVOUS) -> None:
        self._limit = limit
        self._open: collections.OrderedDict[str, Rendezvous] = collections.OrderedDict()

    async def exchange(
        self, key: str, participant: int, payload: Any, expected: list[int], deadline_s: float
    ) -> ExchangeResult:
        """Add `participant`'s payload under `key`; return when every expected participant
        has arrived, or after `deadline_s` with the absent ones named."""
        rv = self._open.get(key)
        if rv is None:
            rv = self._open[key] = Rendezvous(frozenset(expected))
            while len(self._open) > self._limit:
                _, oldest = self._open.popitem(last=False)
                oldest.complete.set()
        rv.payloads[participant] = payload
        if rv.expected <= rv.payloads.keys():
            rv.complete.set()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(rv.complete.wait(), timeout=deadline_s)
        missing = tuple(sorted(rv.expected - rv.payloads.keys()))
        result = ExchangeResult(key, dict(rv.payloads), missing)
        rv.readers += 1
        if rv.readers >= len(rv.payloads) and self._open.get(key) is rv:
            del self._open[key]  # everyone who came has read it
        return result


class Claims:
    """First caller wins per (job, key) until the claim expires."""

    def __init__(self) -> None:
        self._until: dict[tuple[str, str], float] = {}

    def claim(self, job_id: str, key: str, ttl_s: float, now: float) -> bool:
        """True for the first caller per (job, key) within `ttl_s`; expired claims are dropped."""
        self._until = {k: t for k, t in self._until.items() if t > now}
        if (job_id, key) in self._until:
            return False
        self._until[(job_id, key)] = now + ttl_s
        return True
