"""Where a live straggler's extra time goes: the straggler and two of its peers sample where
their active thread is for a second and a half (the `samples` command, all at once), and the
place the straggler is and its peers are not is its `where` (`stacks.analysis.odd_place`).

Zero code change: no span says where a step's time goes, so the report looks while it runs.
The stragglers are the monitors' failing findings and the active straggler alerts (a job that
marks no steps has only the group judge's alerts).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rankscope.runtime import deadlines
from rankscope.runtime.ask import Command, ask_one
from rankscope.runtime.protocol import ProbeState, ProbeStatus
from rankscope.stacks.analysis import odd_place
from rankscope.stacks.model import TimeShares

if TYPE_CHECKING:
    from rankscope.runtime.client import HubClient

PEERS = 2
"""Peers sampled beside the straggler: their mean share is what the group does anyway."""
SAMPLE_S = 1.5
"""How long each rank samples (the probe's own bound, `stacks.worker.MAX_SAMPLE_S`)."""
STRAGGLER_RULES = frozenset({"straggler", "collective_latency"})
MAX_STRAGGLERS = 2
"""Stragglers sampled at most: the verdict names one."""


def stragglers(
    health: Iterable[Mapping[str, Any]], events: Iterable[Mapping[str, Any]]
) -> list[tuple[str | None, int]]:
    """(group, rank) of each one-rank straggler finding and active straggler alert."""
    found: list[tuple[str | None, int]] = []
    for h in health:
        for f in h.get("findings", ()):
            ranks = list(f.get("ranks") or ())
            if f.get("kind") == "straggler" and len(ranks) == 1:
                found.append((f.get("group") or None, int(ranks[0])))
    active: dict[tuple[str, Any], Mapping[str, Any]] = {}
    for e in sorted(events, key=lambda e: e.get("time", 0.0)):
        p = e.get("payload") or {}
        key = (str(p.get("rule")), p.get("rank"))
        if e.get("kind") == "alert" and key[0] in STRAGGLER_RULES and key[1] is not None:
            active[key] = p
        elif e.get("kind") == "alert_resolved":
            active.pop(key, None)
    found += [(p.get("group") or None, int(rank)) for (_, rank), p in active.items()]
    return list(dict.fromkeys(found))[:MAX_STRAGGLERS]


def sample_places(
    client: HubClient, probes: Sequence[ProbeStatus], targets: Sequence[tuple[str | None, int]]
) -> tuple[dict[str, Any], ...]:
    """Per straggler with a place of its own: {group, rank, place, share, peers_share,
    seconds}. One fan-out for all of them and their peers."""
    live = [p for p in probes if p.state != ProbeState.DEAD and p.context.rank is not None]
    asked: list[tuple[str | None, int, ProbeStatus, list[ProbeStatus]]] = []
    for group, rank in targets:
        members = [p for p in live if group is None or p.context.group == group]
        itself = [p for p in members if p.context.rank == rank]
        others = [p for p in members if p.context.rank != rank][:PEERS]
        if itself and others:
            asked.append((group, rank, itself[0], others))
    if not asked:
        return ()
    everyone = list({p.info.probe_id: p for _, _, o, ps in asked for p in (o, *ps)}.values())
    command = Command("samples", {"seconds": SAMPLE_S}, expect=TimeShares)
    shares = ask_one(client, everyone, command, deadlines.SAMPLES_S).payloads()
    out = []
    for group, rank, own, peers in asked:
        mine = shares.get(own.info.probe_id)
        theirs = [shares[p.info.probe_id] for p in peers if p.info.probe_id in shares]
        odd = odd_place(mine, theirs) if mine is not None else None
        if mine is not None and odd is not None:
            out.append(
                {
                    "group": group,
                    "rank": rank,
                    "place": odd.place,
                    "share": odd.share,
                    "peers_share": odd.peers_share,
                    "seconds": mine.seconds,
                }
            )
    return tuple(out)
