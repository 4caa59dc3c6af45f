"""Grouping stacks across ranks: identical stacks together, the odd ones out first."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rankscope.ranks import format_ranks
from rankscope.stacks.model import Frame, ProcessStacks, ThreadStack, headline


@dataclass(frozen=True)
class StackMember:
    """One thread of one process that has a group's stack."""

    rank: int | None
    pid: int
    hostname: str
    node_id: str
    actor_class: str | None
    thread_name: str
    source: str
    unresponsive: str = ""
    """Why the probe did not answer, when the stack came from py-spy instead."""


@dataclass(frozen=True)
class StackGroup:
    headline: str
    """Where they are, in one line: `all_reduce <- train_step train.py:88`."""
    frames: tuple[Frame, ...]
    members: tuple[StackMember, ...]
    main_thread: bool
    """True when this stack is some process's main thread (where training code runs)."""

    @property
    def idle(self) -> bool:
        """No user frame: an idle Ray worker loop, a parked pool thread, library machinery."""
        return all(f.library for f in self.frames)

    @property
    def label(self) -> str:
        """`ranks 0-2,4-7`, `rank 3`, or pids for processes with no rank."""
        return label_members(self.members)

    @property
    def process_count(self) -> int:
        return len({(m.node_id, m.pid) for m in self.members})


@dataclass(frozen=True)
class Unanswered:
    """A process whose stacks could not be taken by its probe nor by py-spy."""

    rank: int | None
    pid: int
    hostname: str
    reason: str


@dataclass(frozen=True)
class StackReport:
    job_id: str
    groups: tuple[StackGroup, ...]
    unanswered: tuple[Unanswered, ...]
    process_count: int


def group_stacks(job_id: str, processes: Sequence[ProcessStacks]) -> StackReport:
    """Group every thread of every process by identical stack (file, line, function)."""
    buckets: dict[tuple[tuple[str, int, str], ...], list[tuple[ThreadStack, StackMember]]] = {}
    unanswered = []
    for proc in processes:
        ctx = proc.status.context
        if not proc.threads:
            unanswered.append(Unanswered(ctx.rank, ctx.pid, ctx.hostname, proc.error))
            continue
        for thread in proc.threads:
            member = StackMember(
                ctx.rank,
                ctx.pid,
                ctx.hostname,
                ctx.node_id,
                ctx.actor_class,
                thread.thread_name,
                proc.source,
                proc.error if proc.source == "py-spy" else "",
            )
            key = tuple((f.filename, f.lineno, f.function) for f in thread.frames)
            buckets.setdefault(key, []).append((thread, member))
    groups = [
        StackGroup(
            headline=headline(entries[0][0].frames),
            frames=entries[0][0].frames,
            members=tuple(sorted((m for _, m in entries), key=_member_order)),
            main_thread=any(t.is_main for t, _ in entries),
        )
        for entries in buckets.values()
    ]
    groups.sort(
        key=lambda g: (g.idle, not g.main_thread, g.process_count, _member_order(g.members[0]))
    )
    return StackReport(job_id, tuple(groups), tuple(unanswered), len(processes))


def summarize(report: StackReport) -> str | None:
    """One sentence on where the ranks' busy threads are, naming the odd ones out.

    Example: `ranks 0-2 wait in all_reduce <- train_step train.py:88; rank 3 is elsewhere:
    load_batch data.py:41`. None when fewer than two ranked groups run user code.
    """
    busy = [g for g in report.groups if not g.idle]
    ranked = [g for g in busy if any(m.rank is not None for m in g.members)]
    if len(ranked) < 2:
        return None
    majority = max(ranked, key=lambda g: g.process_count)
    others = [g for g in ranked if g is not majority]
    verb = "wait in" if majority.process_count > 1 else "is in"
    text = f"{majority.label} {verb} {majority.headline}; "
    text += "; ".join(
        f"{g.label} {'is' if g.process_count == 1 else 'are'} elsewhere: {g.headline}"
        for g in others
    )
    return text


def label_members(members: Sequence[StackMember]) -> str:
    ranks = {m.rank for m in members if m.rank is not None}
    parts = []
    if ranks:
        parts.append(f"{'rank' if len(ranks) == 1 else 'ranks'} {format_ranks(ranks)}")
    no_rank = sorted({(m.hostname, m.pid) for m in members if m.rank is None})
    parts.extend(f"pid {pid}@{host}" for host, pid in no_rank)
    return "; ".join(parts)


def _member_order(m: StackMember) -> tuple[int, int, str, int]:
    return (m.rank is None, m.rank if m.rank is not None else 0, m.hostname, m.pid)
