"""The registry by job from the hub, with a one-line cause for every dead process."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeState, ProbeStatus

__all__ = ["JobStatus", "any_lost", "job_statuses"]


@dataclass(frozen=True)
class JobStatus:
    """One job's processes as the hub sees them, and why the dead ones died (by probe id)."""

    job_id: str
    processes: tuple[ProbeStatus, ...]
    deaths: dict[str, str]


def job_statuses(address: str | None, job: str | None) -> list[JobStatus]:
    """Every selected job's registry; Ray's GCS and the node explain each death."""
    from rankscope.hang.death import explain_deaths

    client = HubClient.attach(address)
    jobs = client.jobs(job)
    dead = [p for probes in jobs.values() for p in probes if p.state == ProbeState.DEAD]
    deaths = explain_deaths(dead) if dead else {}
    return [
        JobStatus(
            job_id,
            tuple(probes),
            {p.info.probe_id: deaths[p.info.probe_id] for p in probes if p.info.probe_id in deaths},
        )
        for job_id, probes in jobs.items()
    ]


def any_lost(jobs: Sequence[JobStatus]) -> bool:
    """A dead or unresponsive process is a finding (exit code 1)."""
    return any(p.state != ProbeState.ALIVE for j in jobs for p in j.processes)
