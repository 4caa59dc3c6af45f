"""Ask every live probe of each selected job for its environment, and compare them."""

from __future__ import annotations

from dataclasses import dataclass

from rankscope.doctor.analysis import compare_environments, ordered
from rankscope.doctor.model import EnvironmentFacts, EnvironmentFinding, ProcessFacts
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeState, ProbeStatus

__all__ = ["JobEnvironment", "job_environments"]

DEADLINE_S = 5.0


@dataclass(frozen=True)
class JobEnvironment:
    """One job's environments (ranks first, then processes without a rank), what differs
    between the ranks, and who did not answer."""

    job_id: str
    processes: list[ProcessFacts]
    findings: list[EnvironmentFinding]
    unanswered: list[str]


def job_environments(
    address: str | None, job: str | None, *, client: HubClient | None = None
) -> list[JobEnvironment]:
    """Each job's processes' facts, compared; `client` reuses a caller's attached hub."""
    client = client or HubClient.attach(address)
    results = []
    for job_id, probes in client.jobs(job).items():
        live = [p for p in probes if p.state != ProbeState.DEAD]
        answer = client.fan_out("environment", live, deadline_s=DEADLINE_S)
        by_id = {p.info.probe_id: p for p in live}
        processes = ordered(
            [_process_facts(by_id[r.probe_id], r.payload) for r in answer.replies if r.ok]
        )
        silent = [p.context.label for p in answer.missing]
        results.append(JobEnvironment(job_id, processes, compare_environments(processes), silent))
    return results


def _process_facts(probe: ProbeStatus, facts: EnvironmentFacts) -> ProcessFacts:
    ctx = probe.context
    return ProcessFacts(ctx.label, ctx.hostname, facts, ctx.rank, ctx.group)
