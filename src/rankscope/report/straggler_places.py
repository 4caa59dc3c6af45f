"""Where a live straggler's extra time goes: the straggler and two of its peers sample where
their active thread is for a second and a half (the `samples` command, all at once), and the
place the straggler is and its peers are not is its `where` (`stacks.analysis.odd_place`).

Zero code change: no span says where a step's time goes, so the report looks while it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rankscope.runtime.protocol import ProbeState, ProbeStatus
from rankscope.stacks.analysis import odd_place
from rankscope.stacks.capture import MAX_SAMPLE_S
from rankscope.stacks.model import TimeShares

PEERS = 2
"""Peers sampled beside the straggler: their mean share is what the group does anyway."""
SAMPLES_DEADLINE_S = MAX_SAMPLE_S + 3.0


def with_straggler_places(
    client: Any, probes: Sequence[ProbeStatus], health: tuple[dict[str, Any], ...]
) -> tuple[dict[str, Any], ...]:
    """`health` with `where` (and the shares) on each straggler finding whose rank has a
    place of its own; findings whose ranks cannot be sampled are left as they are."""
    live = [p for p in probes if p.state != ProbeState.DEAD and p.context.rank is not None]
    out = []
    for h in health:
        findings = [_placed(client, live, f) for f in h.get("findings", ())]
        out.append({**h, "findings": findings})
    return tuple(out)


def _placed(client: Any, live: list[ProbeStatus], finding: dict[str, Any]) -> dict[str, Any]:
    ranks = [int(r) for r in finding.get("ranks") or ()]
    if finding.get("kind") != "straggler" or len(ranks) != 1:
        return finding
    group = finding.get("group") or None
    members = [p for p in live if group is None or p.context.group == group]
    own = [p for p in members if p.context.rank == ranks[0]]
    peers = [p for p in members if p.context.rank != ranks[0]][:PEERS]
    if not own or not peers:
        return finding
    result = client.fan_out(
        "samples", own + peers, args={"seconds": MAX_SAMPLE_S}, deadline_s=SAMPLES_DEADLINE_S
    )
    shares = {
        r.probe_id: r.payload for r in result.replies if r.ok and isinstance(r.payload, TimeShares)
    }
    mine = shares.get(own[0].info.probe_id)
    theirs = [shares[p.info.probe_id] for p in peers if p.info.probe_id in shares]
    odd = odd_place(mine, theirs) if mine is not None else None
    if mine is None or odd is None:
        return finding
    why = (
        f"; it spends {odd.share:.0%} of its time in {odd.place}, its peers "
        f"{odd.peers_share:.0%} (sampled {mine.seconds:.1f} s)"
    )
    return {**finding, "where": odd.place, "evidence": str(finding.get("evidence", "")) + why}
