"""The registry by job from the hub, with a one-line cause for every dead process."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rankscope.hang.model import Death
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeState, ProbeStatus
from rankscope.runtime.selection import by_group, filter_jobs_by_group

__all__ = ["STATUS_SUMMARIES", "JobStatus", "any_lost", "job_statuses"]

STATUS_SUMMARIES = ["monitor", "logs"]
"""The heartbeat summaries `status` reads of a live process: the monitor's alert lines and the
silence rule (the last log record). Not `collectives` (the bulk of a heartbeat, 16 records): a
straggler by last arrivals alone reaches `status` as the alert its group's judge raised, which
reads them."""


@dataclass(frozen=True)
class JobStatus:
    """One job's processes as the hub sees them, and why the dead ones died (by probe id)."""

    job_id: str
    processes: tuple[ProbeStatus, ...]
    deaths: dict[str, str]
    first_death: str = ""
    """When several ranks died: which died first and how the others followed."""
    died_at: dict[str, float] = field(default_factory=dict)
    """When Ray saw each dead process end (by probe id), where Ray knows it."""


def job_statuses(
    address: str | None,
    job: str | None,
    group: str | None = None,
    *,
    client: HubClient | None = None,
    summaries: list[str] | None = None,
) -> list[JobStatus]:
    """Every selected job's registry; Ray's GCS and the node explain each death.

    `client`: a hub client the caller attached already (else one is attached at `address`).
    `summaries`: the heartbeat summaries a live process's row keeps (all when None; `status`
    reads STATUS_SUMMARIES); a dead one keeps all, its last words.
    A process on a node Ray declared dead has the hub's "node gone: ..." first in its cause
    (`hang.death.find_deaths`).
    """
    from rankscope.hang.death import find_deaths

    client = client or HubClient.attach(address)
    found = client.jobs(job, summaries)
    jobs = filter_jobs_by_group(found, group)
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


def any_lost(jobs: Sequence[JobStatus]) -> bool:
    """A dead or unresponsive process is a finding (exit code 1)."""
    return any(p.state != ProbeState.ALIVE for j in jobs for p in j.processes)
