"""Text for the findings and the `top` table, from the same dataclasses `--json` prints."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from rankscope.monitor.collect import JobHealth, JobTop
from rankscope.monitor.view import RankRow
from rankscope.units import human_bytes

__all__ = ["render_health", "render_top"]


def render_health(job: JobHealth) -> RenderableType:
    head = Text(f"job {job.job_id}: {job.ranks} ranks, up to {job.steps} steps", style="bold")
    lines: list[RenderableType] = [head]
    if not job.ranks:
        lines.append(Text("  no rank reported numbers yet: call rankscope.step(loss=...)"))
    elif not job.findings:
        lines.append(Text("  healthy: no finding", style="green"))
    for f in job.findings:
        where = f" [group {f.group}]" if f.group else ""
        lines.append(Text(f"  {f.kind.value}{where}: {f.evidence}", style="red"))
        lines.append(Text(f"    what to do: {f.advice}"))
    for m in job.missing:
        lines.append(Text(f"  missing: {m}", style="yellow"))
    return Group(*lines)


def _num(value: float | None, fmt: str = "{:.4g}") -> str:
    return "-" if value is None else fmt.format(value)


def _mem(used: int, total: int) -> str:
    if not total:
        return "-"
    return f"{human_bytes(used)}/{human_bytes(total)} {used / total:.0%}"


def render_top(jobs: Sequence[JobTop]) -> RenderableType:
    tables: list[RenderableType] = []
    for job in jobs:
        table = Table(title=f"job {job.job_id}: worst rank first", title_justify="left")
        for col in (
            "rank",
            "group",
            "node",
            "step",
            "step s",
            "tokens/s",
            "wait s",
            "straggler",
            "last-in",
            "loss",
            "grad",
            "device mem",
            "host mem",
            "alerts",
        ):
            table.add_column(col, overflow="fold")  # fmt: skip
        for r in job.ranks:
            table.add_row(*_cells(r))
        tables.append(table)
    return Group(*tables)


def _cells(r: RankRow) -> list[str]:
    rank = str(r.rank) if r.state == "alive" else f"{r.rank} ({r.state})"
    return [
        rank,
        r.group[-21:],
        r.node,
        str(r.step),
        _num(r.step_s, "{:.3f}"),
        _num(r.tokens_per_s, "{:,.0f}"),
        _num(r.wait_s, "{:.3f}"),
        _num(r.straggler, "{:.2f}x"),
        f"{r.last_arrival_share:.0%}",
        _num(r.loss),
        _num(r.grad_norm),
        _mem(r.device_used, r.device_total),
        _mem(r.host_used, r.host_total),
        "; ".join(r.alerts),
    ]
