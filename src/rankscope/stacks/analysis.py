"""Grouping stacks across ranks (identical stacks together, the odd ones out first), and the
finding: ranks stuck waiting for a rank of their group that is elsewhere.

Ranks in different places is normal while they make progress: a rank waits in all_reduce for a
slower one many times a second. It is a finding when ranks wait in a collective (or have stopped
stepping) while another rank of their group is somewhere else, and not every rank of that group
has stepped (`rankscope.step()`) within PROGRESS_WINDOW_S. One snapshot cannot tell a wait from
a stall, so `collect.stack_reports` looks twice (`confirmed`), unless the waiting ranks' own
recorders say they have waited in their collective for LONG_WAIT_S already (`waited_long`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from rankscope.stacks.model import (
    ProcessStacks,
    StackFinding,
    StackGroup,
    StackMember,
    StackReport,
    ThreadStack,
    TimeShares,
    Unanswered,
    active_thread,
    headline,
    in_collective,
    label_members,
)

__all__ = [
    "LONG_WAIT_S",
    "MIN_ODD_SHARE",
    "PROGRESS_WINDOW_S",
    "OddPlace",
    "confirmed",
    "find_stuck",
    "group_stacks",
    "odd_place",
    "summarize",
    "waited_long",
]

PROGRESS_WINDOW_S = 1.0
"""A rank that called `rankscope.step()` this recently makes progress: it is not stuck."""
LONG_WAIT_S = 5.0
"""Ranks that have waited this long in a collective (their recorders say so) are stuck there,
not in a normal wait: their finding needs no second look (`waited_long`). As `rankscope
hang`'s minimum wait."""


def group_stacks(
    job_id: str, processes: Sequence[ProcessStacks], now: float | None = None
) -> StackReport:
    """Group every thread of every process by identical stack (file, line, function), and
    find ranks stuck waiting for a rank of their group that is elsewhere (`find_stuck`).

    How long ago each rank stepped is told at the time its probe took its stacks, on its own
    clock (`ProcessStacks.taken_at`), else at `now` (default: now) for py-spy's.
    """
    now = time.time() if now is None else now
    buckets: dict[tuple[tuple[str, int, str], ...], list[tuple[ThreadStack, StackMember]]] = {}
    unanswered = []
    for proc in processes:
        ctx = proc.status.context
        if not proc.threads:
            unanswered.append(Unanswered(ctx.rank, ctx.pid, ctx.hostname, proc.error))
            continue
        progress, taken_at = proc.status.progress, proc.taken_at or now
        since_step = max(0.0, taken_at - progress.last_progress) if progress.step > 0 else None
        waited = None
        if proc.taken_at is not None and progress.waiting_since is not None:
            waited = max(0.0, proc.taken_at - progress.waiting_since)
        active = active_thread(proc.threads)
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
                ctx.group,
                thread is active,
                progress.step,
                since_step,
                proc.parent.context.label if proc.parent is not None else "",
                waited,
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
    return StackReport(job_id, tuple(groups), tuple(unanswered), len(processes), find_stuck(groups))


def find_stuck(groups: Sequence[StackGroup]) -> tuple[StackFinding, ...]:
    """Per group of ranks: ranks waiting in a collective (or stalled) while another rank of the
    group is elsewhere, unless every rank of the group stepped within PROGRESS_WINDOW_S.

    Each rank is where its active thread is; processes without a rank take no part.
    """
    by_group: dict[str | None, dict[int, list[StackMember]]] = {}
    for index, group in enumerate(groups):
        for m in group.members:
            if m.active and m.rank is not None:
                places = by_group.setdefault(m.group, {})
                places.setdefault(index, []).append(m)
    findings = []
    for rank_group, places in sorted(by_group.items(), key=lambda kv: kv[0] or ""):
        members = [m for ms in places.values() for m in ms]
        if len(places) < 2 or all(_progressing(m) for m in members):
            continue
        waiting = [i for i in places if in_collective(groups[i].frames)] or [
            i for i, ms in places.items() if any(_stalled(m) for m in ms)
        ]
        if not waiting:
            continue
        main = max(waiting, key=lambda i: (len(places[i]), -min(_ranks(places[i]))))
        others = sorted((i for i in places if i != main), key=lambda i: min(_ranks(places[i])))
        prefix = f"group {rank_group}: " if len(by_group) > 1 and rank_group else ""
        findings.append(
            StackFinding(
                rank_group,
                _ranks(places[main]),
                groups[main].headline,
                tuple(sorted(r for i in others for r in _ranks(places[i]))),
                prefix
                + _waits(places[main], groups[main])
                + "; "
                + "; ".join(
                    f"{label_members(places[i])} {'is' if len(places[i]) == 1 else 'are'} "
                    f"elsewhere: {groups[i].headline}"
                    for i in others
                ),
            )
        )
    return tuple(findings)


def waited_long(report: StackReport) -> tuple[StackFinding, ...]:
    """The findings whose waiting ranks have all waited LONG_WAIT_S or more in their
    collective, as their own recorders say: the group has waited that long for the ranks
    elsewhere, which a second look a second later can only repeat."""
    waited = {
        (m.group, m.rank): m.waited_s
        for g in report.groups
        for m in g.members
        if m.active and m.rank is not None
    }

    def long(f: StackFinding, rank: int) -> bool:
        seconds = waited.get((f.group, rank))
        return seconds is not None and seconds >= LONG_WAIT_S

    return tuple(f for f in report.findings if f.waiting and all(long(f, r) for r in f.waiting))


def confirmed(first: StackReport, again: StackReport) -> StackReport:
    """The second look, with only the findings the first look had too: the same ranks in the
    same places, none of them having stepped in between. A normal wait moves on in between."""
    steps = {(m.group, m.rank): m.step for g in first.groups for m in g.members if m.active}
    kept = tuple(
        f
        for f in again.findings
        if f in first.findings
        and all(
            steps.get((m.group, m.rank)) == m.step
            for g in again.groups
            for m in g.members
            if m.active and m.group == f.group and m.rank in (*f.waiting, *f.elsewhere)
        )
    )
    return replace(again, findings=kept)


CONFIRM_SAMPLE = 64
"""Ranks a sampled second look takes of each side of a finding (`confirm_sample`)."""


def confirm_sample(report: StackReport) -> set[tuple[str | None, int]]:
    """The ranks, as (group, rank), a second look needs to confirm `report`'s findings when
    there are too many to look at all again: for each finding, its ranks elsewhere and ranks
    spread evenly over those waiting, CONFIRM_SAMPLE of each at most. A group stuck at 4,096
    ranks is stuck in every sample of it; a wait that is normal progress moves on in the
    sample too."""
    wanted: set[tuple[str | None, int]] = set()
    for f in report.findings:
        for ranks in (f.elsewhere, f.waiting):
            stride = max(1, -(-len(ranks) // CONFIRM_SAMPLE))  # ceil: at most CONFIRM_SAMPLE
            wanted.update((f.group, r) for r in ranks[::stride])
    return wanted


def confirmed_by_sample(first: StackReport, again: StackReport) -> StackReport:
    """The first look, with only the findings that `again` (a look at `confirm_sample`'s
    ranks) saw unchanged: every sampled rank of the finding that answered in the same stack
    as before and at the same step, and at least one rank of each side answered."""

    def places(report: StackReport) -> dict[tuple[str | None, int], tuple[object, int]]:
        return {
            (m.group, m.rank): (g.frames, m.step)
            for g in report.groups
            for m in g.members
            if m.active and m.rank is not None
        }

    before, after = places(first), places(again)
    kept = tuple(
        f
        for f in first.findings
        if any((f.group, r) in after for r in f.waiting)
        and (not f.elsewhere or any((f.group, r) in after for r in f.elsewhere))
        and all(
            after[f.group, r] == before.get((f.group, r))
            for r in (*f.waiting, *f.elsewhere)
            if (f.group, r) in after
        )
    )
    return replace(first, findings=kept)


def summarize(report: StackReport) -> str | None:
    """The report's findings in one sentence; None when no ranks are stuck.

    Example: `ranks 0-2 wait in all_reduce <- train_step train.py:88; rank 3 is elsewhere:
    load_batch data.py:41`.
    """
    return "; ".join(f.message for f in report.findings) or None


def _waits(members: Sequence[StackMember], group: StackGroup) -> str:
    one = len(members) == 1
    if in_collective(group.frames):
        verb = "waits in" if one else "wait in"
    else:
        verb = "is stalled in" if one else "are stalled in"
    return f"{label_members(members)} {verb} {group.headline}"


def _ranks(members: Sequence[StackMember]) -> tuple[int, ...]:
    return tuple(sorted({m.rank for m in members if m.rank is not None}))


def _progressing(m: StackMember) -> bool:
    return m.since_step_s is not None and m.since_step_s <= PROGRESS_WINDOW_S


def _stalled(m: StackMember) -> bool:
    return m.since_step_s is not None and m.since_step_s > PROGRESS_WINDOW_S


def _member_order(m: StackMember) -> tuple[int, int, str, int]:
    return (m.rank is None, m.rank if m.rank is not None else 0, m.hostname, m.pid)


MIN_ODD_SHARE = 0.2
"""A place is a rank's own when it spends this much more of its time there than its peers."""


@dataclass(frozen=True)
class OddPlace:
    """Where one rank spends time its peers do not: a straggler's extra time."""

    place: str
    """`function file.py:LINE`, the innermost user frame."""
    share: float
    peers_share: float


def odd_place(own: TimeShares, peers: Sequence[TimeShares]) -> OddPlace | None:
    """The place whose share of `own`'s time most exceeds its peers' (their mean), by at least
    `MIN_ODD_SHARE`; None when no place is its own (its time goes where theirs does)."""
    if not own.samples or not peers:
        return None
    best: OddPlace | None = None
    for place, _ in own.places:
        theirs = sum(p.share(place) for p in peers) / len(peers)
        mine = own.share(place)
        if mine - theirs >= MIN_ODD_SHARE and (
            best is None or mine - theirs > best.share - best.peers_share
        ):
            best = OddPlace(place, mine, theirs)
    return best
