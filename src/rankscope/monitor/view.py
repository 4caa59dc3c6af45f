"""The live view's rows (`rankscope top`, the Prometheus exporter): pure, from the heartbeat
summaries the hub keeps, so a refresh asks no rank anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rankscope.hang.model import CollectiveRecord
from rankscope.monitor.analysis import first_nonfinite
from rankscope.monitor.collectives import align
from rankscope.monitor.model import MonitorSummary, RankRow, RankSeries
from rankscope.monitor.straggler import straggler_scores
from rankscope.runtime.protocol import ProbeStatus

__all__ = ["RankInput", "arrivals", "inputs_of", "rank_rows"]


@dataclass(frozen=True)
class RankInput:
    """What the hub holds about one rank."""

    rank: int
    group: str
    node: str
    role: str
    pid: int
    state: str
    summary: MonitorSummary | None
    collectives: tuple[CollectiveRecord, ...] = ()


def rank_rows(inputs: Sequence[RankInput], threshold: float = 1.2) -> list[RankRow]:
    """Every rank's row, the worst first: not alive, a cause, alerts, straggler score, last
    arrivals."""
    groups: dict[str, list[RankInput]] = {}
    for i in inputs:
        groups.setdefault(i.group, []).append(i)
    rows = []
    for members in groups.values():
        with_steps = [m for m in members if m.summary is not None and m.summary.step_s > 0]
        scores = {
            s.rank: s
            for s in straggler_scores(
                {m.rank: [m.summary.step_s] for m in with_steps if m.summary},
                {m.rank: [m.summary.wait_s] for m in with_steps if m.summary},
                *arrivals(members),
                threshold=threshold,
            )
        }
        first_bad = _first_nonfinite_rank(members)
        for m in members:
            s, score = m.summary, scores.get(m.rank)
            alerts = list(s.alerts) if s else []
            if score is not None and score.is_straggler and score.why not in alerts:
                alerts.insert(0, score.why)
            rows.append(
                RankRow(
                    rank=m.rank,
                    group=m.group,
                    node=m.node,
                    role=m.role,
                    pid=m.pid,
                    state=m.state,
                    step=s.step if s else 0,
                    step_s=s.step_s if s else 0.0,
                    tokens_per_s=s.tokens_per_s if s else 0.0,
                    wait_s=s.wait_s if s else 0.0,
                    straggler=score.relative if score else 1.0,
                    last_arrival_share=score.last_arrival_share if score else 0.0,
                    loss=s.loss if s else None,
                    grad_norm=s.grad_norm if s else None,
                    device_used=s.memory.device_used if s else 0,
                    device_total=s.memory.device_total if s else 0,
                    host_used=s.memory.host_used if s else 0,
                    host_total=s.memory.host_total if s else 0,
                    alerts=tuple(alerts),
                    cause=m.rank == first_bad or bool(score and score.is_straggler),
                )
            )
    rows.sort(key=lambda r: r.badness, reverse=True)
    return rows


def _first_nonfinite_rank(members: Sequence[RankInput]) -> int | None:
    """The rank the group's NaN began on, as its alert names it."""
    first = first_nonfinite(
        [
            RankSeries(m.rank, m.group, m.node, m.role, (), m.summary.first_nonfinite)
            for m in members
            if m.summary is not None and m.summary.first_nonfinite is not None
        ]
    )
    return first.ranks[0] if first is not None else None


def arrivals(members: Sequence[RankInput]) -> tuple[dict[int, int], int]:
    """How often each rank of one group arrived last, and over how many collectives."""
    alignment = align({m.rank: m.collectives for m in members if m.collectives})
    return alignment.last_arrivals, alignment.count


def _rank(p: ProbeStatus) -> int:
    return p.context.rank if p.context.rank is not None else -1


def inputs_of(probes: Sequence[ProbeStatus]) -> list[RankInput]:
    """The hub's records as the view's inputs (the `monitor` and `collectives` summaries)."""
    out = []
    for p in probes:
        summary = p.summaries.get("monitor")
        recorded: Any = p.summaries.get("collectives")
        records = tuple(getattr(recorded, "records", ()) or ())
        ctx = p.context
        out.append(
            RankInput(
                rank=_rank(p),
                group=ctx.group or "",
                node=ctx.node_ip or ctx.hostname,
                role=ctx.actor_class or "",
                pid=ctx.pid,
                state=p.state.value,
                summary=summary if isinstance(summary, MonitorSummary) else None,
                collectives=tuple(r for r in records if not r.p2p),
            )
        )
    return out
