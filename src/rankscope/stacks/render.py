"""Grouped stacks as a terminal shows them: odd ones out first, library frames folded."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.text import Text

from rankscope.ranks import format_ranks
from rankscope.stacks.model import Frame, StackGroup, StackReport, Unanswered

__all__ = ["display_path", "frame_lines", "pick_groups", "render_stacks", "short_label"]

INNER_LIBRARY_FRAMES_SHOWN = 2
"""Library frames kept at the top of a stack: the call that blocks, and what wraps it."""
MAX_GROUPS_SHOWN = 8
"""Stacks with user code shown in full (the odd ones out first, and always the biggest);
beyond, one line says how many more. `--all` shows every one."""
MAX_IDLE_SHOWN = 4
"""Idle stacks (library code only) shown, one line each; beyond, one line for the rest."""
MAX_REASONS_SHOWN = 6
"""Distinct reasons a stack is missing (or was taken with py-spy) shown, ranks folded."""
MAX_LABEL_CHARS = 120
"""A group's ranks in one line at most this long (`ranks 0,2,4,... (2,048 ranks)`)."""


def render_stacks(
    report: StackReport, *, all_frames: bool = False, show_all: bool = False
) -> RenderableType:
    """The report in a screen or two whatever the number of ranks: the odd stacks and the
    biggest in full, ranks folded into ranges, counts for the rest; `show_all` for everything."""
    parts: list[RenderableType] = [
        Text(
            f"job {report.job_id}: {report.process_count} processes, "
            f"{len(report.groups)} distinct stacks",
            style="bold",
        )
    ]
    for finding in report.findings:
        parts.append(Text(f"finding: {finding.message}", style="bold yellow"))
    busy = [g for g in report.groups if all_frames or not g.idle]
    idle = [g for g in report.groups if not all_frames and g.idle]
    shown, hidden = (busy, []) if show_all else pick_groups(busy, MAX_GROUPS_SHOWN)
    for group in shown:
        parts.append(_render_group(group, all_frames, show_all))
    if hidden:
        parts.append(_more_line(hidden, "distinct stacks"))
    idle_shown, idle_hidden = (
        (idle, []) if show_all else (idle[:MAX_IDLE_SHOWN], idle[MAX_IDLE_SHOWN:])
    )
    for group in idle_shown:
        parts.append(_render_idle_group(group, show_all))
    if idle_hidden:
        parts.append(_more_line(idle_hidden, "idle stacks"))
    parts.extend(_render_unanswered(report, show_all))
    return Group(*parts)


def pick_groups(
    groups: Sequence[StackGroup], limit: int
) -> tuple[list[StackGroup], list[StackGroup]]:
    """(shown, hidden): the first `limit` in report order (the odd ones out come first), the
    one with the most processes always among them, so the screen says where most ranks are."""
    if len(groups) <= limit:
        return list(groups), []
    biggest = max(groups, key=lambda g: g.process_count)
    head = list(groups[: limit - 1])
    keep = {id(g) for g in head} | {id(biggest)}
    if len(keep) < limit:
        keep.add(id(groups[limit - 1]))
    shown = [g for g in groups if id(g) in keep]
    return shown, [g for g in groups if id(g) not in keep]


def short_label(label: str, count: int, limit: int = MAX_LABEL_CHARS) -> str:
    """A group's label cut at a comma when too long, with how many ranks it holds."""
    if len(label) <= limit:
        return label
    cut = label.rfind(",", 0, limit)
    return f"{label[: cut if cut > 0 else limit]},... ({count:,} processes)"


def _more_line(hidden: Sequence[StackGroup], what: str) -> Text:
    processes = len({(m.node_id, m.pid) for g in hidden for m in g.members})
    return Text(
        f"\n... {len(hidden)} more {what} of {processes} process{'es' if processes != 1 else ''}"
        " (--all shows them)",
        style="dim",
    )


def _render_unanswered(report: StackReport, show_all: bool) -> list[RenderableType]:
    """Processes without a stack: one line each with `show_all`, else one per reason."""
    if show_all or len(report.unanswered) <= MAX_REASONS_SHOWN:
        return [
            Text(f"\n{_who(m.rank, m.pid, m.hostname)} (pid {m.pid}@{m.hostname}): no stack: "
                 f"{m.reason}", style="red")
            for m in report.unanswered
        ]  # fmt: skip
    by_reason: dict[str, list[Unanswered]] = {}
    for miss in report.unanswered:
        by_reason.setdefault(miss.reason, []).append(miss)
    lines: list[RenderableType] = []
    reasons = sorted(by_reason.items(), key=lambda kv: -len(kv[1]))
    for reason, misses in reasons[:MAX_REASONS_SHOWN]:
        who = short_label(_who_many(misses), len(misses))
        lines.append(Text(f"\n{who}: no stack: {reason}", style="red"))
    rest = sum(len(m) for _, m in reasons[MAX_REASONS_SHOWN:])
    if rest:
        lines.append(
            Text(f"\n... {rest} more processes without a stack (--all lists them)", style="red")
        )
    return lines


def _who(rank: int | None, pid: int, hostname: str) -> str:
    return f"rank {rank}" if rank is not None else f"pid {pid}@{hostname}"


def _who_many(misses: Sequence[Unanswered]) -> str:
    ranks = [m.rank for m in misses if m.rank is not None]
    parts = [f"{'rank' if len(ranks) == 1 else 'ranks'} {format_ranks(ranks)}"] if ranks else []
    parts.extend(f"pid {m.pid}@{m.hostname}" for m in misses if m.rank is None)
    return ", ".join(parts)


def _render_idle_group(group: StackGroup, show_all: bool = False) -> RenderableType:
    """Threads in library code only (idle Ray workers, parked pools): one line each."""
    label = group.label if show_all else short_label(group.label, group.process_count)
    text = Text(f"{label}: idle in {group.headline}", style="dim")
    text.append(_thread_note(group), style="dim")
    return text


def _thread_note(group: StackGroup) -> str:
    threads = sorted({m.thread_name for m in group.members})
    via = sorted({m.source for m in group.members if m.source != "probe"})
    note = f"   [{', '.join(threads[:3])}{', ...' if len(threads) > 3 else ''}"
    return note + (f"; via {', '.join(via)}]" if via else "]")


def _render_group(group: StackGroup, all_frames: bool, show_all: bool = False) -> RenderableType:
    title = Text("\n")
    label = group.label if show_all else short_label(group.label, group.process_count)
    title.append(label, style="bold cyan")
    title.append(f": {group.headline}", style="bold")
    title.append(_thread_note(group), style="dim")
    lines = [title]
    silent = sorted(
        {(m.rank, m.pid, m.unresponsive) for m in group.members if m.unresponsive},
        key=lambda t: (t[0] is None, t[0] or 0, t[1]),
    )
    if show_all or len(silent) <= MAX_REASONS_SHOWN:
        for rank, pid, why in silent:
            who = f"rank {rank}" if rank is not None else f"pid {pid}"
            lines.append(
                Text(f"    unresponsive: {who} ({why}); stack taken with py-spy", style="yellow")
            )
    else:  # one line per reason, the ranks folded
        by_reason: dict[str, list[tuple[int | None, int]]] = {}
        for rank, pid, why in silent:
            by_reason.setdefault(why, []).append((rank, pid))
        for why, who_list in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
            ranks = [r for r, _ in who_list if r is not None]
            who = f"ranks {format_ranks(ranks)}" if ranks else ""
            pids = len(who_list) - len(ranks)
            who += (", " if who and pids else "") + (
                f"{pids} processes without a rank" if pids else ""
            )
            lines.append(
                Text(
                    f"    unresponsive: {short_label(who, len(who_list))} ({why}); "
                    "stacks taken with py-spy",
                    style="yellow",
                )
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
