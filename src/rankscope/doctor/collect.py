"""Ask every live probe of each selected job for its environment, and compare them."""

from __future__ import annotations

from rankscope.doctor.analysis import compare_environments, ordered
from rankscope.doctor.model import (
    EnvironmentDiagnosis,
    EnvironmentFacts,
    JobEnvironment,
    ProcessFacts,
)
from rankscope.runtime import deadlines
from rankscope.runtime.ask import Command, Selection, ask_one, select
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeStatus

__all__ = ["SAVED_NAME", "diagnose_environments", "job_environments"]

SAVED_NAME = "diagnose.json"
"""Each job's latest `diagnose` in its run directory (the report's environment section reads it
after the job ended); one file per job, replaced each time."""


def job_environments(
    address: str | None, selection: Selection, *, client: HubClient | None = None
) -> list[JobEnvironment]:
    """Each job's processes' facts, compared; `client` reuses a caller's attached hub."""
    client = client or HubClient.attach(address)
    results = []
    for job_id, probes in select(client, selection).items():
        answers = ask_one(client, probes, Command("environment"), deadlines.ENVIRONMENT_S)
        processes = ordered([_process_facts(p, reply.payload) for p, reply in answers.answered])
        silent = [p.context.label for p in answers.silent]
        failed = [f"{p.context.label} ({error})" for p, error in answers.failed]
        results.append(
            JobEnvironment(job_id, processes, compare_environments(processes), silent + failed)
        )
    return results


def diagnose_environments(address: str | None, selection: Selection) -> EnvironmentDiagnosis:
    """`rankscope diagnose`: every job's environments, each job's also saved in its run
    directory through the hub; a failure to save costs the copy only."""
    from rankscope.cli.output import to_json

    client = HubClient.attach(address)
    jobs = tuple(job_environments(address, selection, client=client))
    saved = []
    for job in jobs:
        if not job.processes:
            continue
        text = to_json("diagnose", EnvironmentDiagnosis((job,)))
        try:
            saved.append(client.write_artifact(job.job_id, SAVED_NAME, text))
        except Exception:  # a full disk or a busy hub: the check's result is what matters
            continue
    return EnvironmentDiagnosis(jobs, tuple(saved))


def _process_facts(probe: ProbeStatus, facts: EnvironmentFacts) -> ProcessFacts:
    ctx = probe.context
    return ProcessFacts(ctx.label, ctx.hostname, facts, ctx.rank, ctx.group)
