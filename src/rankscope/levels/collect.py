"""The CLI side of `rankscope level`: ask (or switch) the selected ranks through their probes."""

from __future__ import annotations

from dataclasses import dataclass

from rankscope.level import LevelState
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeState
from rankscope.runtime.selection import filter_jobs_by_group, filter_ranks

__all__ = ["RankLevel", "switch_levels"]


@dataclass(frozen=True)
class RankLevel:
    """One process's level after the command, or why it did not answer."""

    job_id: str
    who: str
    rank: int | None
    pid: int
    state: LevelState | None
    error: str = ""


def switch_levels(
    address: str | None,
    job: str | None,
    group: str | None,
    ranks: frozenset[int] | None,
    level: str | None,
    for_s: float | None,
    sample_every: int | None = None,
) -> list[RankLevel]:
    """Each selected process's level (switched first when `level` or `sample_every` is given)."""
    client = HubClient.attach(address)
    args: dict[str, object] = {}
    if level or sample_every is not None:
        args = {"level": level, "for_s": for_s, "sample_every": sample_every}
    rows: list[RankLevel] = []
    for job_id, probes in filter_jobs_by_group(client.jobs(job), group).items():
        chosen = [p for p in filter_ranks(probes, ranks) if p.state != ProbeState.DEAD]
        if not chosen:
            continue
        result = client.fan_out("level", chosen, args=args)
        by_id = {r.probe_id: r for r in result.replies}
        for p in chosen:
            reply = by_id.get(p.info.probe_id)
            state = reply.payload if reply is not None and reply.ok else None
            error = "did not answer" if reply is None else reply.error
            rows.append(
                RankLevel(job_id, p.context.label, p.context.rank, p.context.pid, state, error)
            )
    return rows
