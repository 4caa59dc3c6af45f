"""What each command does, apart from option parsing: attach, select, collect, analyze.

Kept out of `main.py` so that `rankscope --help` does not import Ray.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rankscope.analysis.hang import HangReport
from rankscope.analysis.ranks import parse_rank_spec
from rankscope.analysis.stacks import StackReport, group_stacks
from rankscope.cli.render import render_hang, render_stacks, render_status, to_json
from rankscope.errors import UserError
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeState, ProbeStatus
from rankscope.runtime.selection import filter_ranks
from rankscope.stacks.collect import collect_stacks

__all__ = [
    "any_lost",
    "hang",
    "json_of",
    "render_hang",
    "render_stacks",
    "render_status",
    "stacks",
    "status",
]


def status(
    address: str | None, job: str | None
) -> tuple[dict[str, list[ProbeStatus]], dict[str, str]]:
    """The registry by job, and why each dead process died (probe id -> one line)."""
    from rankscope.hang.death import explain_deaths

    client = HubClient.attach(address)
    jobs = client.jobs(job)
    dead = [p for probes in jobs.values() for p in probes if p.state == ProbeState.DEAD]
    return jobs, explain_deaths(dead) if dead else {}


def stacks(
    address: str | None,
    job: str | None,
    ranks: str | None,
    deadline_s: float,
    *,
    client: HubClient | None = None,
) -> list[StackReport]:
    wanted = parse_rank_spec(ranks) if ranks is not None else None  # bad spec: fail before Ray
    client = client or HubClient.attach(address)
    reports = []
    for job_id, probes in client.jobs(job).items():
        chosen = filter_ranks(probes, wanted)
        if not chosen:
            raise UserError(
                f"--ranks {ranks}: no registered process of job {job_id} has those ranks"
            )
        reports.append(group_stacks(job_id, collect_stacks(client, chosen, deadline_s=deadline_s)))
    return reports


def hang(address: str | None, job: str | None, min_wait_s: float) -> list[HangReport]:
    from rankscope.hang.collect import hang_report

    client = HubClient.attach(address)
    return [
        hang_report(client, job_id, probes, min_wait_s=min_wait_s)
        for job_id, probes in client.jobs(job).items()
    ]


def any_lost(jobs: Mapping[str, Sequence[ProbeStatus]]) -> bool:
    """A dead or unresponsive process is a finding (exit code 1)."""
    return any(p.state != ProbeState.ALIVE for ps in jobs.values() for p in ps)


def json_of(command: str, data: object) -> str:
    return to_json(command, data)
