"""The registry by job from the hub, with a one-line cause for every dead process."""

from __future__ import annotations

from collections.abc import Sequence

from rankscope.hang.model import Death
from rankscope.runtime.ask import Selection, select
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeState, ProbeStatus
from rankscope.runtime.selection import by_group
from rankscope.status.model import JobStatus, JobStatusView, StatusReport

__all__ = ["STATUS_SUMMARIES", "any_lost", "job_statuses", "status_report"]

STATUS_SUMMARIES = ["monitor", "logs"]
"""The heartbeat summaries `status` reads of a live process: the monitor's alert lines and the
silence rule (the last log record). Not `collectives` (the bulk of a heartbeat, 16 records): a
straggler by last arrivals alone reaches `status` as the alert its group's judge raised, which
reads them."""


def status_report(address: str | None, selection: Selection) -> StatusReport:
    """`rankscope status`: every selected job's registry, each death explained, and its
    alerts: the monitor's from the heartbeats, the alert rules' active ones from the run
    directory's events."""
    from rankscope.alerts.collect import job_alerts
    from rankscope.monitor.collect import alert_line_sets

    client = HubClient.attach(address)
    views = []
    for j in job_statuses(address, selection, client=client, summaries=STATUS_SUMMARIES):
        active = [a for a in job_alerts(client, j.job_id, list(j.processes)) if a.active]
        every, unsaid = alert_line_sets(j.processes, active)
        views.append(
            JobStatusView(
                j.job_id,
                j.processes,
                j.deaths,
                j.first_death,
                tuple(every),
                tuple(active),
                tuple(unsaid),
            )
        )
    return StatusReport(tuple(views))


def job_statuses(
    address: str | None,
    selection: Selection,
    *,
    client: HubClient | None = None,
    summaries: list[str] | None = None,
) -> list[JobStatus]:
    """Every selected job's registry; Ray's GCS and the node explain each death.

    `client`: a hub client the caller attached already (else one is attached at `address`).
    `summaries`: the heartbeat summaries a live process's row keeps (all when None; `status`
    reads STATUS_SUMMARIES); a dead one keeps all, its last words.
    A process on a node Ray declared dead has the hub's "node gone: ..." first in its cause
    (`hang.io_death.find_deaths`).
    """
    from rankscope.hang.io_death import find_deaths

    client = client or HubClient.attach(address)
    jobs = select(client, selection, summaries)
    dead = [p for probes in jobs.values() for p in probes if p.state == ProbeState.DEAD]
    deaths = find_deaths(dead) if dead else {}
    return [
        JobStatus(
            job_id,
            tuple(probes),
            {
                p.info.probe_id: deaths[p.info.probe_id].cause
                for p in probes
                if p.info.probe_id in deaths
            },
            _first_deaths(probes, deaths),
            {
                p.info.probe_id: died_at
                for p in probes
                if p.info.probe_id in deaths
                and (died_at := deaths[p.info.probe_id].died_at) is not None
            },
        )
        for job_id, probes in jobs.items()
    ]


def _first_deaths(probes: Sequence[ProbeStatus], deaths: dict[str, Death]) -> str:
    """Per group of ranks, which rank died first, when several did."""
    from rankscope.hang.analysis import first_death

    lines = []
    for members in by_group(probes).values():
        dead = {
            p.context.rank: (deaths[p.info.probe_id], p.last_seen)
            for p in members
            if p.info.probe_id in deaths and p.context.rank is not None
        }
        found = first_death(dead)
        if found is not None:
            lines.append(found[1])
    return "; ".join(lines)


def any_lost(jobs: Sequence[JobStatus | JobStatusView]) -> bool:
    """A dead or unresponsive process is a finding (exit code 1)."""
    return any(p.state != ProbeState.ALIVE for j in jobs for p in j.processes)
