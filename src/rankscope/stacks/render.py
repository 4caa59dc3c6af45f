"""Grouped stacks as a terminal shows them: odd ones out first, library frames folded."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.text import Text

from rankscope.stacks.analysis import StackGroup, StackReport
from rankscope.stacks.model import Frame

__all__ = ["display_path", "frame_lines", "render_stacks"]

INNER_LIBRARY_FRAMES_SHOWN = 2
"""Library frames kept at the top of a stack: the call that blocks, and what wraps it."""


def render_stacks(report: StackReport, *, all_frames: bool = False) -> RenderableType:
    parts: list[RenderableType] = [
        Text(
            f"job {report.job_id}: {report.process_count} processes, "
            f"{len(report.groups)} distinct stacks",
            style="bold",
        )
    ]
    for finding in report.findings:
        parts.append(Text(f"finding: {finding.message}", style="bold yellow"))
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
