"""One job's environments as a table: the versions, then every difference found."""

from __future__ import annotations

from rich.table import Table

from rankscope.doctor.collect import JobEnvironment

__all__ = ["render_environment"]


def render_environment(env: JobEnvironment) -> Table:
    first = env.processes[0].facts if env.processes else None
    table = Table(
        title=f"job {env.job_id}: environment of {len(env.processes)} processes",
        title_justify="left",
        show_header=False,
    )
    if first is not None:
        table.add_row(
            "versions",
            f"python {first.python}, ray {first.ray}, torch {first.torch}, "
            f"cuda {first.cuda}, nccl {first.nccl}, rankscope {first.rankscope}",
        )
    for finding in env.findings:
        table.add_row(f"[bold red]{finding.what}[/]", finding.message)
    if not env.findings:
        table.add_row("[green]ok[/]", "versions, NCCL/torch variables and /dev/shm agree")
    if env.unanswered:
        table.add_row("[yellow]no answer[/]", ", ".join(env.unanswered))
    return table
