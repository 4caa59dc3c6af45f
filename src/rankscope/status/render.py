"""The registry as a table: one row per process, then one line per death and its cause.

Ranks come first, by group and rank; processes without a rank (Ray Train's controller, verl's
driver-side actors) follow in a section of their own. A job whose ranks form several groups
(verl's worker groups) gets a group column: a rank is unique within its group only. A job of
more than `FOLD_ABOVE` processes is folded (`analysis.fold_status`): alike ranks share a row
(their rank ranges, how many processes, the step range), the odd ones keep theirs; `show_all`
(`--all`) draws a row per process at any size.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from rankscope.runtime.protocol import ProbeState, ProbeStatus
from rankscope.status.analysis import FOLD_ABOVE, STUCK_AFTER_S, StatusLine, fold_status
from rankscope.units import ago

__all__ = ["render_status"]


def render_status(
    job_id: str,
    probes: Sequence[ProbeStatus],
    deaths: dict[str, str] | None = None,
    now: float | None = None,
    first_death: str = "",
    show_all: bool = False,
) -> RenderableType:
    now = time.time() if now is None else now
    folding = not show_all and len(probes) > FOLD_ABOVE
    lines = fold_status(probes, now, fold=folding)
    probes = sorted(probes, key=_order)
    groups = {p.context.group for p in probes if p.context.rank is not None}
    versions = sorted({p.info.version for p in probes})
    one_version = len(versions) == 1
    table = Table(
        title=f"job {job_id}: {len(probes)} processes"
        + (f", rankscope {versions[0]}" if one_version else "")
        + " (seen, stepped: seconds ago)",
        title_justify="left",
        # No outer frame and one space between columns: 80 columns keep node IPs whole and
        # leave the actor class the most room.
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    columns = [
        *(["group"] if len(groups) > 1 else []),
        *COLUMNS,
        *([] if one_version else ["version"]),
    ]
    for column in columns:
        # Only the actor column gives up width: a class name too long for the terminal folds
        # onto more lines. The others keep theirs (a node IP stays whole); when even that
        # cannot fit, they fold too, never cut short ("192.0.2…", "verl_wo…").
        table.add_column(
            column,
            justify="right" if column in ("rank", "pid", "step") else "left",
            no_wrap=column != "actor",
            overflow="fold",
        )
    for i, line in enumerate(lines):
        ctx = line.first.context
        if i > 0 and ctx.rank is None and lines[i - 1].first.context.rank is not None:
            table.add_section()  # processes without a rank: apart from the ranks
        row = [*([ctx.group or "-"] if len(groups) > 1 else []), *_cells(line, now)]
        table.add_row(*row, *([] if one_version else [_versions(line)]))
    dead = [p for p in probes if p.info.probe_id in (deaths or {})]
    causes = [
        Text(f"{_who(p)} died: {(deaths or {})[p.info.probe_id]}", style="red")
        for p in (dead if not folding else dead[:MAX_CAUSES])
    ]
    if folding and len(dead) > MAX_CAUSES:
        more = len(dead) - MAX_CAUSES
        causes.append(Text(f"... {more:,} more deaths (--all shows them)", style="red"))
    if folding:
        causes.insert(0, Text(FOLD_NOTE, "dim"))
    if any(line.stuck for line in lines):
        causes.append(
            Text(
                f"stuck: alive, but no step for {STUCK_AFTER_S:g} s or more while its group steps",
                style="yellow",
            )
        )
    if first_death:
        causes.append(Text(f"first: {first_death}", style="bold red"))
    return Group(table, *causes) if causes else table


FOLD_NOTE = (
    "alike ranks share a row (xN: N processes; a..b: ranks a to b less those on rows of "
    "their own); --all shows one per process"
)
MAX_CAUSES = 16
"""Death lines under a folded table; --all prints every one."""
MAX_RANKS_CHARS = 14
"""A folded row's rank ranges past this many characters become `first..last` (the ranks in
between that are not on the row have rows of their own); its pid cell is the count, `x4092`."""


def _cells(line: StatusLine, now: float) -> list[str | Text]:
    """rank, node, pid, actor, state, seen, step, stepped: of one process, or of alike ones."""
    p = line.first
    ctx = p.context
    state = Text("stuck", style="yellow") if line.stuck else None
    state = state or Text(line.state.value, style=_STATE_STYLE[line.state])
    if not line.folded:
        return [
            "-" if ctx.rank is None else str(ctx.rank),
            ctx.node_ip or ctx.hostname,
            str(ctx.pid),
            ctx.actor_class or "-",
            state,
            ago(now, p.last_seen),
            str(p.progress.step),
            ago(now, p.progress.last_progress),
        ]
    ranks, nodes = line.ranks, line.nodes
    if len(ranks) > MAX_RANKS_CHARS:
        numbers = [p.context.rank for p in line.processes if p.context.rank is not None]
        ranks = f"{min(numbers)}..{max(numbers)}"
    low, high = line.steps
    return [
        ranks,
        nodes[0] if len(nodes) == 1 else f"{len(nodes):,} nodes",
        f"x{len(line.processes)}",
        ctx.actor_class or "-",
        state,
        ago(now, line.last_seen),
        str(low) if low == high else f"{low}-{high}",
        ago(now, line.last_step),
    ]


def _versions(line: StatusLine) -> str:
    return ",".join(sorted({p.info.version for p in line.processes}))


def _order(p: ProbeStatus) -> tuple[bool, str, int, int]:
    ctx = p.context
    return (ctx.rank is None, ctx.group or "", ctx.rank or 0, ctx.pid)


COLUMNS = ("rank", "node", "pid", "actor", "state", "seen", "step", "stepped")


def _who(probe: ProbeStatus) -> str:
    """`rank 2 (pid 4242)`; a process without a rank is `pid 25748@vm`, its actor if known."""
    ctx = probe.context
    if ctx.rank is None:  # the label is `pid N@host` already
        return ctx.label + (f" ({ctx.actor_class})" if ctx.actor_class else "")
    return f"{ctx.label} (pid {ctx.pid})"


_STATE_STYLE = {
    ProbeState.ALIVE: "green",
    ProbeState.UNRESPONSIVE: "yellow",
    ProbeState.DEAD: "bold red",
}
