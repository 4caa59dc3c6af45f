"""One job's environments as a table: who was asked, the versions, then every difference found."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from rankscope.doctor.analysis import rank_groups
from rankscope.doctor.model import JobEnvironment
from rankscope.ranks import format_ranks

__all__ = ["render_environment"]


def render_environment(env: JobEnvironment) -> Table:
    table = Table(
        title=f"job {env.job_id}: environment of {len(env.processes)} processes",
        title_justify="left",
        show_header=False,
    )
    groups = rank_groups(env.processes)
    ranked = [p for members in groups.values() for p in members]
    unranked = [p for p in env.processes if p.rank is None]
    for group, members in groups.items():
        of = f" (group {group})" if len(groups) > 1 and group is not None else ""
        table.add_row("ranks", format_ranks(p.rank for p in members if p.rank is not None) + of)
    if unranked:
        table.add_row("no rank", ", ".join(p.label for p in unranked) + " (listed, not compared)")
    shown = ranked or env.processes
    first = shown[0] if shown else None
    if first is not None:
        f = first.facts
        torch = "not loaded" if f.torch is None else f.torch
        if f.torch is not None:
            torch += f", cuda {f.cuda}" if f.cuda else " (no CUDA)"
            torch += f", nccl {f.nccl}" if f.nccl else ""
        table.add_row(
            "versions",
            f"python {f.python}, ray {f.ray}, rankscope {f.rankscope}, torch {torch}",
        )
    for finding in env.findings:
        table.add_row(Text(finding.what, style="bold red"), Text(finding.message))
    if not env.findings:
        table.add_row("[green]ok[/]", "versions, NCCL/torch variables and /dev/shm agree")
    if env.unanswered:
        table.add_row("[yellow]no answer[/]", ", ".join(env.unanswered))
    return table
