"""The trace summary as a terminal shows it: where it went, a row per rank, the stragglers."""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from rankscope.trace.model import TraceSummary
from rankscope.units import human_bytes

__all__ = ["render_summary"]


def _pct(share: float) -> str:
    return f"{share * 100:.0f}%"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


def render_summary(summary: TraceSummary) -> RenderableType:
    """Path and size, the clock error, a row per rank, then the straggler verdict."""
    lines: list[RenderableType] = []
    clock = (
        "clocks not aligned"
        if summary.clock_error_ms is None
        else f"clocks aligned within {summary.clock_error_ms:.2f} ms"
    )
    lines.append(
        Text(
            f"trace: {summary.path} ({human_bytes(summary.bytes_written)}, {summary.events} "
            f"events; {clock}); open it in ui.perfetto.dev",
            style="bold",
        )
    )
    if summary.dropped_events or summary.dropped_spans or summary.missed_collectives:
        lines.append(
            Text(
                f"left out: {summary.dropped_events} events over the byte budget (repeated "
                f"spans sampled), {summary.dropped_spans} spans dropped by full worker rings, "
                f"{summary.missed_collectives} collectives overwritten before a drain",
                style="yellow",
            )
        )
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    idle = any(r.idle_share is not None for r in summary.ranks)
    columns = ["rank", "user", "wait", "transfer", *(["idle"] if idle else [])]
    for column in (*columns, "steps", "step ms p50", "p90", "last in"):
        table.add_column(column, justify="left" if column == "rank" else "right")
    for row in summary.ranks:
        idle_cell = [_pct(row.idle_share or 0.0)] if idle else []
        table.add_row(
            row.label,
            _pct(row.user_share),
            _pct(row.wait_share),
            _pct(row.transfer_share),
            *idle_cell,
            str(row.steps),
            _ms(row.step_median_s),
            _ms(row.step_p90_s),
            f"{row.last_arrivals}/{row.collectives}",
        )
    lines.append(table)
    stragglers = [s for s in summary.stragglers if s.is_straggler]
    for s in stragglers:
        lines.append(Text(f"straggler: {s.why}", style="bold red"))
    if summary.stragglers and not stragglers:
        lines.append(Text("no straggler: ranks keep pace", style="green"))
    if summary.node_imbalance is not None and summary.node_imbalance > 1.1:
        lines.append(
            Text(f"load imbalance across nodes: {summary.node_imbalance:.2f}x", style="yellow")
        )
    for pending in summary.pending_tasks:
        lines.append(Text(f"pending Ray task: {pending}", style="bold red"))
    for missing in summary.missing:
        lines.append(Text(f"no trace from {missing}", style="yellow"))
    for note in summary.notes:
        lines.append(Text(note, style="dim"))
    return Group(*lines)
