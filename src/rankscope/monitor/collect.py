"""The CLI side: the live rows from the hub's summaries, the findings from every rank's series."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rankscope.alerts.model import Alert
from rankscope.monitor import analysis
from rankscope.monitor.model import Finding, FindingKind, MonitorSummary, RankSeries, Thresholds
from rankscope.monitor.straggler import StragglerScore
from rankscope.monitor.view import RankInput, RankRow, rank_rows
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeState, ProbeStatus
from rankscope.runtime.selection import filter_jobs_by_group

__all__ = ["JobHealth", "JobTop", "alert_lines", "inputs_of", "job_health", "job_tops"]

DEFAULT_DEADLINE_S = 5.0


@dataclass(frozen=True)
class JobTop:
    """One job's live rows (`rankscope top`), the worst rank first."""

    job_id: str
    ranks: tuple[RankRow, ...]


@dataclass(frozen=True)
class JobHealth:
    """One job's findings over every rank's whole series (`rankscope monitor`)."""

    job_id: str
    findings: tuple[Finding, ...]
    ranks: int
    """Ranks whose series were analysed."""
    steps: int
    """The longest series analysed."""
    missing: tuple[str, ...]
    """Processes that did not answer, and why."""
    stragglers: dict[str, tuple[StragglerScore, ...]]
    """Per group, every rank's straggler score, the worst first."""


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


def job_tops(address: str | None, job: str | None, group: str | None = None) -> list[JobTop]:
    client = HubClient.attach(address)
    return tops(client, job, group)


def tops(client: HubClient, job: str | None, group: str | None = None) -> list[JobTop]:
    """One refresh of `rankscope top`: one hub call, no rank is asked anything."""
    jobs = filter_jobs_by_group(client.jobs(job), group)
    return [JobTop(j, tuple(rank_rows(inputs_of(p)))) for j, p in jobs.items()]


def job_health(
    address: str | None,
    job: str | None,
    group: str | None = None,
    *,
    thresholds: Thresholds | None = None,
    deadline_s: float = DEFAULT_DEADLINE_S,
) -> list[JobHealth]:
    """Ask every live rank for its series and run every detector over the job."""
    client = HubClient.attach(address)
    out = []
    for job_id, probes in filter_jobs_by_group(client.jobs(job), group).items():
        live = [p for p in probes if p.state != ProbeState.DEAD]
        series: list[RankSeries] = []
        missing = [
            f"{p.context.label} (pid {p.context.pid}): dead" for p in probes if p not in live
        ]
        if live:
            result = client.fan_out("monitor", live, deadline_s=deadline_s)
            by_id = {p.info.probe_id: p for p in live}
            for reply in result.replies:
                if reply.ok and isinstance(reply.payload, RankSeries):
                    series.append(reply.payload)
                else:
                    p = by_id.get(reply.probe_id)
                    who = p.context.label if p else reply.probe_id
                    missing.append(f"{who}: {reply.error or 'unexpected reply'}")
            missing += [
                f"{p.context.label} (pid {p.context.pid}): no answer within {deadline_s:g}s"
                for p in result.missing
            ]
        series = analysis.analysable(series)
        findings = analysis.analyze(series, thresholds)
        groups: dict[str, list[RankSeries]] = {}
        for s in series:
            groups.setdefault(s.group, []).append(s)
        t = thresholds or Thresholds()
        scores = {g: tuple(analysis.stragglers(m, t.straggler)) for g, m in groups.items()}
        out.append(
            JobHealth(
                job_id,
                tuple(findings),
                len(series),
                max((len(s.samples) for s in series), default=0),
                tuple(missing),
                scores,
            )
        )
    return out


def alert_lines(probes: Sequence[ProbeStatus], covered: Sequence[Alert] = ()) -> list[str]:
    """The monitor's alerts for `rankscope status`, one line per alert, from the heartbeats.

    `covered`: alerts status prints anyway (the monitor raises its alerted findings through the
    alerts feature); a line they already say is left out.
    """
    inputs = inputs_of(probes)
    own = {i.pid: set(i.summary.alerts) if i.summary else set() for i in inputs}
    stragglers = {a.rank for a in covered if a.rule == FindingKind.STRAGGLER.value}
    said = [a.message for a in covered]
    lines = []
    for r in rank_rows(inputs):
        for a in r.alerts:
            if a not in own.get(r.pid, ()) and r.rank in stragglers:
                continue  # the view's straggler line, raised by the group's judge
            if any(a in m for m in said):
                continue
            lines.append(a if a.startswith(f"rank {r.rank} ") else f"{_who(r)}: {a}")
    return lines


def _who(r: RankRow) -> str:
    return f"rank {r.rank}" if r.rank >= 0 else f"pid {r.pid}"
