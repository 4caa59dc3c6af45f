"""Text for the findings and the `top` table, from the same dataclasses `--json` prints."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from rankscope.monitor.comm import CommBench
from rankscope.monitor.model import JobHealth, JobTop, RankRow
from rankscope.units import human_bytes

__all__ = ["render_comm_bench", "render_health", "render_top"]


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


def render_comm_bench(bench: CommBench) -> RenderableType:
    """The bus bandwidths by message size, then the node-pair matrix."""
    parts: list[RenderableType] = [
        Text(f"comm-bench: {bench.backend}, {len(bench.nodes)} nodes, one rank each", style="bold")
    ]
    if bench.note:
        parts.append(Text(bench.note, style="yellow"))
    table = Table(title="collectives (nccl-tests' algbw and busbw)", title_justify="left")
    for col in ("op", "bytes", "time", "algbw GB/s", "busbw GB/s"):
        table.add_column(col, justify="right")
    for c in bench.collectives:
        table.add_row(
            c.op, human_bytes(c.bytes), f"{c.time_s * 1e6:,.0f} us",
            f"{c.algbw_gbs:.3f}", f"{c.busbw_gbs:.3f}",
        )  # fmt: skip
    parts.append(table)
    nodes = list(bench.nodes)
    matrix = Table(title="send/recv: latency us / bandwidth GB/s", title_justify="left")
    matrix.add_column("")
    for n in nodes:
        matrix.add_column(n, justify="right")
    links = {(p.a, p.b): p for p in bench.pairs} | {(p.b, p.a): p for p in bench.pairs}
    for a in nodes:
        cells = []
        for b in nodes:
            p = links.get((a, b))
            cells.append("-" if p is None else f"{p.latency_s * 1e6:,.0f} / {p.bandwidth_gbs:.2f}")
        matrix.add_row(a, *cells)
    parts.append(matrix)
    for slow in bench.slow_pairs:
        parts.append(Text(f"slow pair: {slow}", style="red"))
    return Group(*parts)
