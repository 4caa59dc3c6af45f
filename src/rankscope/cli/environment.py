"""`rankscope diagnose` (no flags): every rank's environment, and what differs between them."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from rankscope.analysis.environment import (
    EnvironmentFinding,
    ProcessFacts,
    compare_environments,
)
from rankscope.cli.render import to_json
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeState

DEADLINE_S = 5.0


def check_environment(address: str | None, job: str | None, as_json: bool, console: Console) -> int:
    client = HubClient.attach(address)
    results = {}
    for job_id, probes in client.jobs(job).items():
        live = [p for p in probes if p.state != ProbeState.DEAD]
        answer = client.fan_out("environment", live, deadline_s=DEADLINE_S)
        by_id = {p.info.probe_id: p for p in live}
        processes = [
            ProcessFacts(
                by_id[r.probe_id].context.label, by_id[r.probe_id].context.hostname, r.payload
            )
            for r in answer.replies
            if r.ok
        ]
        silent = [p.context.label for p in answer.missing]
        results[job_id] = (processes, compare_environments(processes), silent)
    if as_json:
        console.print_json(
            to_json(
                "diagnose",
                {
                    j: {"processes": p, "findings": f, "unanswered": s}
                    for j, (p, f, s) in results.items()
                },
            )
        )
    else:
        for job_id, (processes, findings, silent) in results.items():
            console.print(_render(job_id, processes, findings, silent))
    return 1 if any(f for _, f, _ in results.values()) else 0


def _render(
    job_id: str,
    processes: list[ProcessFacts],
    findings: list[EnvironmentFinding],
    silent: list[str],
) -> Table:
    first = processes[0].facts if processes else None
    table = Table(
        title=f"job {job_id}: environment of {len(processes)} processes",
        title_justify="left",
        show_header=False,
    )
    if first is not None:
        table.add_row(
            "versions",
            f"python {first.python}, ray {first.ray}, torch {first.torch}, "
            f"cuda {first.cuda}, nccl {first.nccl}, rankscope {first.rankscope}",
        )
    for finding in findings:
        table.add_row(f"[bold red]{finding.what}[/]", finding.message)
    if not findings:
        table.add_row("[green]ok[/]", "versions, NCCL/torch variables and /dev/shm agree")
    if silent:
        table.add_row("[yellow]no answer[/]", ", ".join(silent))
    return table
