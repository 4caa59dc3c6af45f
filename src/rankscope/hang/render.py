"""A hang report as a terminal shows it: findings first, then each group's last collective."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from rankscope.hang.analysis import HangReport
from rankscope.ranks import format_ranks

__all__ = ["render_hang"]


def render_hang(report: HangReport) -> RenderableType:
    lines: list[RenderableType] = []
    verdict = "healthy: no rank is stuck" if report.ok else f"{len(report.findings)} finding(s)"
    who = f"job {report.job_id}" + (f", group {report.group}" if report.group else "")
    lines.append(Text(f"{who}: {verdict}", style="bold"))
    for finding in report.findings:
        text = Text(f"{finding.kind.value}: ", style="bold red")
        text.append(finding.message)
        lines.append(text)
    for group in report.groups:
        waiting = f"; in a collective: {format_ranks(group.waiting)}" if group.waiting else ""
        lines.append(
            Text(
                f"  group {group.group} (ranks {format_ranks(group.ranks)}): "
                f"last #{group.last_seq}{waiting}",
                style="dim",
            )
        )
    if report.missing_ranks:
        lines.append(
            Text(f"  no evidence from ranks {format_ranks(report.missing_ranks)}", style="yellow")
        )
    return Group(*lines)
