"""The registry as a table: one row per process, then one line per death and its cause."""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from rankscope.runtime.protocol import ProbeState, ProbeStatus
from rankscope.units import ago

__all__ = ["render_status"]


def render_status(
    job_id: str,
    probes: Sequence[ProbeStatus],
    deaths: dict[str, str] | None = None,
    now: float | None = None,
) -> RenderableType:
    now = time.time() if now is None else now
    table = Table(
        title=f"job {job_id}: {len(probes)} processes (seen, stepped: seconds ago)",
        title_justify="left",
    )
    for column in ("rank", "node", "pid", "actor", "state", "seen", "step", "stepped", "version"):
        table.add_column(column, justify="right" if column in ("rank", "pid", "step") else "left")
    for p in probes:
        ctx = p.context
        table.add_row(
            "-" if ctx.rank is None else str(ctx.rank),
            ctx.node_ip or ctx.hostname,
            str(ctx.pid),
            ctx.actor_class or "-",
            Text(p.state.value, style=_STATE_STYLE[p.state]),
            ago(now, p.last_seen),
            str(p.progress.step),
            ago(now, p.progress.last_progress),
            p.info.version,
        )
    causes = [
        Text(
            f"{p.context.label} (pid {p.context.pid}) died: {(deaths or {})[p.info.probe_id]}",
            style="red",
        )
        for p in probes
        if p.info.probe_id in (deaths or {})
    ]
    return Group(table, *causes) if causes else table


_STATE_STYLE = {
    ProbeState.ALIVE: "green",
    ProbeState.UNRESPONSIVE: "yellow",
    ProbeState.DEAD: "bold red",
}
