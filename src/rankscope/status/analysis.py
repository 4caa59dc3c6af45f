"""`rankscope status` at scale: alike ranks folded into one line, the odd ones kept apart.

At 4,096 ranks a line per process is 4,096 lines in which the one dead rank hides. Ranks of one
group with the same state and role whose steps lie close together fold into one line with their
rank ranges (`0-4095  alive  step 120-121`); a rank far behind its group starts a band of its
own. Dead, unresponsive and stuck ranks (alive, but no step for `STUCK_AFTER_S` while their
group steps) are what the user looks for: each gets its own line, up to `MAX_ODD_LINES`. Pure:
no Ray, no I/O; `render.py` draws the lines, `--all` draws every process instead.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from rankscope.ranks import format_ranks
from rankscope.runtime.protocol import ProbeState, ProbeStatus

__all__ = [
    "FOLD_ABOVE",
    "MAX_ODD_LINES",
    "MAX_STEP_BANDS",
    "STUCK_AFTER_S",
    "StatusLine",
    "fold_status",
    "step_bands",
    "stuck_probes",
]

FOLD_ABOVE = 16
"""Jobs of up to this many processes get a line per process; bigger ones are folded."""
STUCK_AFTER_S = 30.0
"""An alive rank that stepped before and has not for this long while its group steps is stuck."""
MAX_ODD_LINES = 32
"""Dead, unresponsive and stuck processes shown one per line; more are folded like the rest."""
MAX_STEP_BANDS = 4
"""At most this many lines for the alike ranks of one group, state and role: split at the
widest gaps between their steps."""
STEP_SLACK = 2
"""Steps this close (or within 1% of the highest) are one band: heartbeats report steps late."""


@dataclass(frozen=True)
class StatusLine:
    """One line of the folded table: one process, or several alike ones."""

    processes: tuple[ProbeStatus, ...]
    state: ProbeState
    stuck: bool = False

    @property
    def first(self) -> ProbeStatus:
        return self.processes[0]

    @property
    def folded(self) -> bool:
        return len(self.processes) > 1

    @property
    def ranks(self) -> str:
        """`0-4095`, or `-` for processes without a rank."""
        ranks = [p.context.rank for p in self.processes if p.context.rank is not None]
        return format_ranks(ranks) if ranks else "-"

    @property
    def steps(self) -> tuple[int, int]:
        steps = [p.progress.step for p in self.processes]
        return min(steps), max(steps)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted({p.context.node_ip or p.context.hostname for p in self.processes}))

    @property
    def last_seen(self) -> float:
        """The longest-silent process's last heartbeat."""
        return min(p.last_seen for p in self.processes)

    @property
    def last_step(self) -> float:
        """The longest-idle process's last step."""
        return min(p.progress.last_progress for p in self.processes)


def stuck_probes(probes: Iterable[ProbeStatus], now: float, stuck_after_s: float) -> set[str]:
    """Probe ids of alive ranks that stepped before and have not for `stuck_after_s` while
    another rank of their group has; a group that is idle as a whole is not stuck."""
    by_group: dict[str | None, list[ProbeStatus]] = defaultdict(list)
    for p in probes:
        if p.state == ProbeState.ALIVE and p.context.rank is not None and p.progress.step > 0:
            by_group[p.context.group].append(p)
    stuck: set[str] = set()
    for members in by_group.values():
        quiet = [p for p in members if now - p.progress.last_progress >= stuck_after_s]
        if len(quiet) < len(members):
            stuck.update(p.info.probe_id for p in quiet)
    return stuck


def step_bands(
    probes: Sequence[ProbeStatus], max_bands: int = MAX_STEP_BANDS
) -> list[list[ProbeStatus]]:
    """Alike processes split by step where the steps jump (over `STEP_SLACK`, or 1% of the
    highest step): the widest jumps first, at most `max_bands` bands, lowest steps first."""
    ordered = sorted(probes, key=lambda p: p.progress.step)
    if not ordered:
        return []
    slack = max(STEP_SLACK, ordered[-1].progress.step // 100)
    jumps = [
        (ordered[i].progress.step - ordered[i - 1].progress.step, i)
        for i in range(1, len(ordered))
        if ordered[i].progress.step - ordered[i - 1].progress.step > slack
    ]
    cuts = sorted(i for _, i in sorted(jumps, reverse=True)[: max_bands - 1])
    edges = [0, *cuts, len(ordered)]
    return [ordered[a:b] for a, b in pairwise(edges)]


def fold_status(
    probes: Sequence[ProbeStatus],
    now: float,
    *,
    stuck_after_s: float = STUCK_AFTER_S,
    max_odd: int = MAX_ODD_LINES,
    fold: bool = True,
) -> list[StatusLine]:
    """The table's lines: ranks by group and rank, processes without a rank after them.

    With `fold`, alive ranks of one group and role fold into step bands; dead, unresponsive and
    stuck processes get a line each (the first `max_odd`; the rest fold by state). Without it,
    one line per process.
    """
    stuck = stuck_probes(probes, now, stuck_after_s)
    ordered = sorted(probes, key=_order)
    if not fold:
        return [StatusLine((p,), p.state, p.info.probe_id in stuck) for p in ordered]
    odd = [p for p in ordered if p.state != ProbeState.ALIVE or p.info.probe_id in stuck]
    lines = [StatusLine((p,), p.state, p.info.probe_id in stuck) for p in odd[:max_odd]]
    alike: dict[tuple[object, ...], list[ProbeStatus]] = defaultdict(list)
    for p in odd[max_odd:]:
        alike[_kind(p, p.info.probe_id in stuck)].append(p)
    shown = {p.info.probe_id for p in odd}
    for p in ordered:
        if p.info.probe_id not in shown:
            alike[_kind(p, False)].append(p)
    for (*_, state, is_stuck), members in alike.items():
        lines.extend(
            StatusLine(tuple(sorted(band, key=_order)), ProbeState(state), bool(is_stuck))
            for band in step_bands(members)
        )
    return sorted(lines, key=lambda line: _order(line.first))


def _kind(p: ProbeStatus, stuck: bool) -> tuple[object, ...]:
    """What alike processes share: ranked or not, group, role, state, stuck."""
    ctx = p.context
    return (ctx.rank is None, ctx.group or "", ctx.actor_class or "", p.state.value, stuck)


def _order(p: ProbeStatus) -> tuple[bool, str, int, int]:
    ctx = p.context
    return (ctx.rank is None, ctx.group or "", ctx.rank or 0, ctx.pid)
