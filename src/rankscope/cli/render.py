"""Turning reports into what a terminal shows (rich) and what `--json` prints.

Both come from the same dataclasses, so the table and the JSON never disagree.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from rankscope.analysis.hang import HangReport
from rankscope.analysis.ranks import format_ranks
from rankscope.analysis.stacks import StackGroup, StackReport, summarize
from rankscope.runtime.protocol import ProbeState, ProbeStatus
from rankscope.serialize import plain
from rankscope.stacks.model import Frame

SCHEMA_VERSION = 1
INNER_LIBRARY_FRAMES_SHOWN = 2
"""Library frames kept at the top of a stack: the call that blocks, and what wraps it."""


def to_json(command: str, data: Any) -> str:
    """`{"schema_version": 1, "command": ..., "data": ...}` from dataclasses and enums."""
    return json.dumps(
        {"schema_version": SCHEMA_VERSION, "command": command, "data": plain(data)},
        indent=2,
    )


# ------------------------------------------------------------------- stacks
def render_stacks(report: StackReport, *, all_frames: bool = False) -> RenderableType:
    parts: list[RenderableType] = [
        Text(
            f"job {report.job_id}: {report.process_count} processes, "
            f"{len(report.groups)} distinct stacks",
            style="bold",
        )
    ]
    finding = summarize(report)
    if finding:
        parts.append(Text(f"finding: {finding}", style="bold yellow"))
    for group in report.groups:
        if group.idle and not all_frames:
            parts.append(_render_idle_group(group))
        else:
            parts.append(_render_group(group, all_frames))
    for miss in report.unanswered:
        who = f"rank {miss.rank}" if miss.rank is not None else f"pid {miss.pid}@{miss.hostname}"
        parts.append(
            Text(f"\n{who} (pid {miss.pid}@{miss.hostname}): no stack: {miss.reason}", style="red")
        )
    return Group(*parts)


def _render_idle_group(group: StackGroup) -> RenderableType:
    """Threads in library code only (idle Ray workers, parked pools): one line each."""
    text = Text(f"{group.label}: idle in {group.headline}", style="dim")
    text.append(_thread_note(group), style="dim")
    return text


def _thread_note(group: StackGroup) -> str:
    threads = sorted({m.thread_name for m in group.members})
    via = sorted({m.source for m in group.members if m.source != "probe"})
    note = f"   [{', '.join(threads[:3])}{', ...' if len(threads) > 3 else ''}"
    return note + (f"; via {', '.join(via)}]" if via else "]")


def _render_group(group: StackGroup, all_frames: bool) -> RenderableType:
    title = Text("\n")
    title.append(group.label, style="bold cyan")
    title.append(f": {group.headline}", style="bold")
    title.append(_thread_note(group), style="dim")
    lines = [title]
    silent = sorted(
        {(m.rank, m.pid, m.unresponsive) for m in group.members if m.unresponsive},
        key=lambda t: (t[0] is None, t[0] or 0, t[1]),
    )
    for rank, pid, why in silent:
        who = f"rank {rank}" if rank is not None else f"pid {pid}"
        lines.append(
            Text(f"    unresponsive: {who} ({why}); stack taken with py-spy", style="yellow")
        )
    for line in frame_lines(group.frames, all_frames=all_frames):
        lines.append(Text(f"    {line}", style="dim" if line.startswith("...") else ""))
    return Group(*lines)


def frame_lines(frames: Sequence[Frame], *, all_frames: bool = False) -> list[str]:
    """Innermost first; runs of library frames folded into one line unless `all_frames`."""
    if all_frames:
        return [_frame_line(f) for f in frames]
    out: list[str] = []
    hidden = 0
    for i, frame in enumerate(frames):
        if frame.library and i >= INNER_LIBRARY_FRAMES_SHOWN:
            hidden += 1
            continue
        if hidden:
            out.append(f"... {hidden} library frame{'s' if hidden > 1 else ''}")
            hidden = 0
        out.append(_frame_line(frame))
    if hidden:
        out.append(f"... {hidden} library frame{'s' if hidden > 1 else ''}")
    return out


def _frame_line(frame: Frame) -> str:
    return f"{frame.function:<24} {display_path(frame.filename)}:{frame.lineno}"


def display_path(filename: str) -> str:
    """Library paths from their package root (`torch/distributed/...`); user paths in full."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in filename:
            return filename.rsplit(marker, 1)[1]
    _head, sep, tail = filename.rpartition("/lib/python3.")
    if sep and "/" in tail:
        return tail.split("/", 1)[1]
    return filename


# --------------------------------------------------------------------- hang
def render_hang(report: HangReport) -> RenderableType:
    lines: list[RenderableType] = []
    verdict = "healthy: no rank is stuck" if report.ok else f"{len(report.findings)} finding(s)"
    lines.append(Text(f"job {report.job_id}: {verdict}", style="bold"))
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


# ------------------------------------------------------------------- status
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


def ago(now: float, then: float) -> str:
    """Seconds as a short duration: `0.4s`, `12s`, `3m05s`, `2h01m`."""
    s = max(0.0, now - then)
    if s < 10:
        return f"{s:.1f}s"
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
