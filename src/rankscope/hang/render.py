"""A hang report as a terminal shows it: findings first, then each group's last collective."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from rankscope.hang.model import HangReport
from rankscope.ranks import format_ranks

__all__ = ["render_hang"]

MAX_FINDINGS_SHOWN = 8
MAX_GROUPS_SHOWN = 8
"""Collective groups listed (those with ranks waiting first); `--all` lists every one. A
4,096-rank job with tensor, pipeline and data parallelism has thousands of groups."""


def render_hang(report: HangReport, *, show_all: bool = False) -> RenderableType:
    """The findings and the collective groups, a screen's worth unless `show_all`."""
    lines: list[RenderableType] = []
    verdict = "healthy: no rank is stuck" if report.ok else f"{len(report.findings)} finding(s)"
    who = f"job {report.job_id}" + (f", group {report.group}" if report.group else "")
    lines.append(Text(f"{who}: {verdict}", style="bold"))
    findings = report.findings if show_all else report.findings[:MAX_FINDINGS_SHOWN]
    for finding in findings:
        text = Text(f"{finding.kind.value}: ", style="bold red")
        text.append(finding.message)
        lines.append(text)
    if len(findings) < len(report.findings):
        more = len(report.findings) - len(findings)
        lines.append(Text(f"... {more} more findings (--all shows them)", style="red"))
    groups = list(report.groups)
    if not show_all and len(groups) > MAX_GROUPS_SHOWN:
        waiting_first = sorted(groups, key=lambda g: not g.waiting)[:MAX_GROUPS_SHOWN]
        chosen = {id(g) for g in waiting_first}
        groups = [g for g in groups if id(g) in chosen]
    for group in groups:
        waiting = f"; in a collective: {format_ranks(group.waiting)}" if group.waiting else ""
        lines.append(
            Text(
                f"  group {group.group} (ranks {format_ranks(group.ranks)}): "
                f"last #{group.last_seq}{waiting}",
                style="dim",
            )
        )
    if len(groups) < len(report.groups):
        more = len(report.groups) - len(groups)
        lines.append(Text(f"  ... {more} more collective groups (--all lists them)", style="dim"))
    if report.paused_ranks:
        ranks = format_ranks(report.paused_ranks)
        lines.append(
            Text(
                f"  ranks {ranks} at level off: no collectives recorded "
                f"(`rankscope level light --ranks {ranks}` resumes)",
                style="yellow",
            )
        )
    if report.missing_ranks:
        lines.append(
            Text(f"  no evidence from ranks {format_ranks(report.missing_ranks)}", style="yellow")
        )
    return Group(*lines)
