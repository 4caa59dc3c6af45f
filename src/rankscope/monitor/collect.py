"""The CLI side: the live rows from the hub's summaries, the findings from every rank's series."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from rankscope.alerts.model import Alert
from rankscope.monitor import analysis
from rankscope.monitor.model import (
    FindingKind,
    JobHealth,
    JobTop,
    RankRow,
    RankSeries,
    Thresholds,
)
from rankscope.monitor.view import inputs_of, rank_rows
from rankscope.runtime import deadlines
from rankscope.runtime.ask import Answers, Command, Selection, ask_one, select
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeStatus

__all__ = [
    "alert_line_sets",
    "alert_lines",
    "job_health",
    "job_series",
    "job_tops",
    "watch_tops",
]


def job_tops(
    address: str | None, selection: Selection, *, client: HubClient | None = None
) -> list[JobTop]:
    """One refresh of `rankscope top`: one hub call, no rank is asked anything."""
    client = client or HubClient.attach(address)
    return [JobTop(j, tuple(rank_rows(inputs_of(p)))) for j, p in select(client, selection).items()]


def watch_tops(address: str | None, selection: Selection) -> Iterator[list[JobTop]]:
    """`rankscope top` live: a fresh `job_tops` each time the caller asks for the next one,
    through one hub client."""
    client = HubClient.attach(address)
    while True:
        yield job_tops(address, selection, client=client)


def job_health(
    address: str | None,
    selection: Selection,
    *,
    thresholds: Thresholds | None = None,
    deadline_s: float = deadlines.SERIES_S,
) -> list[JobHealth]:
    """Ask every live rank for its series and run every detector over the job."""
    out = []
    for job_id, answers in job_series(address, selection, deadline_s=deadline_s).items():
        missing = [f"{p.context.label} (pid {p.context.pid}): dead" for p in answers.dead]
        missing += [f"{p.context.label}: {error}" for p, error in answers.failed]
        missing += [
            f"{p.context.label} (pid {p.context.pid}): no answer within {deadline_s:g}s"
            for p in answers.silent
        ]
        series = analysis.analysable([reply.payload for _, reply in answers.answered])
        out.append(_health(job_id, series, thresholds, tuple(missing)))
    return out


def job_series(
    address: str | None,
    selection: Selection,
    *,
    deadline_s: float = deadlines.SERIES_S,
    client: HubClient | None = None,
) -> dict[str, Answers]:
    """Every selected job's ranks asked for their step series (`RankSeries`), by job."""
    client = client or HubClient.attach(address)
    series = Command("monitor", expect=RankSeries)
    return {
        job_id: ask_one(client, probes, series, deadline_s)
        for job_id, probes in select(client, selection).items()
    }


def _health(
    job_id: str,
    series: list[RankSeries],
    thresholds: Thresholds | None,
    missing: tuple[str, ...],
) -> JobHealth:
    """Every detector over one job's series, and each group's straggler scores (pure)."""
    findings = analysis.analyze(series, thresholds)
    groups: dict[str, list[RankSeries]] = {}
    for s in series:
        groups.setdefault(s.group, []).append(s)
    t = thresholds or Thresholds()
    scores = {g: tuple(analysis.stragglers(m, t.straggler)) for g, m in groups.items()}
    return JobHealth(
        job_id,
        tuple(findings),
        len(series),
        max((len(s.samples) for s in series), default=0),
        missing,
        scores,
    )


def alert_lines(probes: Sequence[ProbeStatus], covered: Sequence[Alert] = ()) -> list[str]:
    """The monitor's alerts for `rankscope status`, one line per alert, from the heartbeats.

    `covered`: alerts status prints anyway (the monitor raises its alerted findings through the
    alerts feature); a line they already say is left out.
    """
    return alert_line_sets(probes, covered)[1]


def alert_line_sets(
    probes: Sequence[ProbeStatus], covered: Sequence[Alert]
) -> tuple[list[str], list[str]]:
    """Every alert line (`--json`), and those `covered` does not already say (the text), from
    one pass over the ranks' rows (at 4,096 ranks the rows are the cost)."""
    inputs = inputs_of(probes)
    own = {i.pid: set(i.summary.alerts) if i.summary else set() for i in inputs}
    stragglers = {a.rank for a in covered if a.rule == FindingKind.STRAGGLER.value}
    said = [a.message for a in covered]
    every, unsaid = [], []
    for r in rank_rows(inputs):
        for a in r.alerts:
            line = a if a.startswith(f"rank {r.rank} ") else f"{_who(r)}: {a}"
            every.append(line)
            if a not in own.get(r.pid, ()) and r.rank in stragglers:
                continue  # the view's straggler line, raised by the group's judge
            if any(a in m for m in said):
                continue
            unsaid.append(line)
    return every, unsaid


def _who(r: RankRow) -> str:
    return f"rank {r.rank}" if r.rank >= 0 else f"pid {r.pid}"
