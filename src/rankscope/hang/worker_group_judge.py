"""Hangs and desyncs raised as alerts within seconds, with no command run (deaths: the hub
raises them, `hang.hub_death_alert`, as it outlives a group torn down at its first death).

The judge runs on the watchdog's thread of ranks 0-3 of each group; the lowest live one judges
(as the monitor's group judge: `alerts.worker_judge.judges_group`). Every `JUDGE_EVERY_S` while its
own rank waits in a collective, else every `JUDGE_EVERY_LARGE_S`, it reads the hub once, lean
(who lives, and since when each rank waits in a collective: `Progress`), and only when a
rank of its group has waited (nearly) past `wait_threshold` or died does it read
the group's `collectives`, `where` and `motion` heartbeat summaries and run `analyze_hang`, the
analysis `rankscope hang` runs. A rank its group waits for that moved between two looks (its
step, its call chain, its disk I/O: a checkpoint being written) is slow, not stuck: no alert
until the group has waited `SLOW_LIMIT_S`. A collective of the judge's own that raised (a
peer died, a shape differed) makes it look at once, within the watchdog's second, before a
client that tears the group down ends it. Alerts go through the alerts feature (events,
`rankscope alerts`, `status`, the webhook), each once until it stops holding. Never raises;
never touches the training thread.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rankscope.alerts.analysis import AlertGate
from rankscope.alerts.model import Alert
from rankscope.alerts.worker import publish
from rankscope.alerts.worker_judge import FALLBACK_RANKS, HubReader, judges_group
from rankscope.context import get_context
from rankscope.hang.analysis import RankEvidence, analyze_hang
from rankscope.hang.model import FindingKind, RecorderSnapshot
from rankscope.hang.motion import SLOW_LIMIT_S, Mark, mark_of, what_moved
from rankscope.hang.worker_recorder import failure_listeners, oldest_call_start
from rankscope.runtime.protocol import ProbeState, ProbeStatus

__all__ = ["GroupJudge", "group_alerts", "motions_of", "stuck_only", "wait_threshold"]

JUDGE_EVERY_S = 2.0
"""While the judge's own rank waits in a collective (or a look is under way), a hang is
raised within this of passing its threshold (plus a heartbeat); otherwise the judge reads the
hub every JUDGE_EVERY_LARGE_S, so a healthy rank 0 pays one lean read per 10 s."""
JUDGE_EVERY_LARGE_S = 10.0
"""In groups of more than `LARGE_GROUP` ranks: each lean read is a row per rank."""
LARGE_GROUP = 256
WAIT_FLOOR_S = 10.0
"""A wait in a collective shorter than this is never a hang alert."""
STEP_FACTOR = 5.0
"""...nor one shorter than this many of the group's median steps (slow steps wait longer)."""
COOLDOWN_S = 300.0
"""An alert that still holds is raised again at most this often."""
RULES = {
    FindingKind.HANG: ("hang", "critical"),
    FindingKind.CROSS_GROUP: ("hang", "critical"),
    FindingKind.MISMATCH: ("desync", "critical"),
    FindingKind.FAILED: ("collective_failed", "error"),
}
SUMMARIES = ["collectives", "where", "monitor", "motion"]


_failed = threading.Event()
"""Set by the recorder when a collective of this process raised (`failure_listeners`)."""
failure_listeners.append(_failed.set)


def wait_threshold(step_s: Sequence[float]) -> float:
    """How long ranks must wait in a collective before it is a hang: max(10 s, 5 median steps)."""
    steps = sorted(s for s in step_s if s > 0)
    median = steps[len(steps) // 2] if steps else 0.0
    return max(WAIT_FLOOR_S, STEP_FACTOR * median)


def needs_a_look(probes: Sequence[ProbeStatus], group: str, now: float, threshold: float) -> bool:
    """From the lean read: a rank of the group waited past the threshold, or died."""
    for p in probes:
        if (p.context.group or "") != group or p.context.rank is None:
            continue
        if p.state == ProbeState.DEAD:
            return True
        since = p.progress.waiting_since
        if since is not None and now - since >= threshold:
            return True
    return False


def group_alerts(
    job_id: str,
    group: str,
    probes: Sequence[ProbeStatus],
    groups: Mapping[str, tuple[int, ...]],
    now: float,
    threshold: float,
) -> list[Alert]:
    """The alerts of one group from its heartbeat summaries (pure): hangs and desyncs as
    `analyze_hang` finds them over the ranks' last collectives."""
    mine = [p for p in probes if (p.context.group or "") == group and p.context.rank is not None]
    evidence = []
    for p in mine:
        snapshot = p.summaries.get("collectives")
        records = snapshot.records if isinstance(snapshot, RecorderSnapshot) else ()
        where = p.summaries.get("where")
        evidence.append(
            RankEvidence(
                rank=int(p.context.rank),  # type: ignore[arg-type]
                records=tuple(records),
                groups=dict(groups),
                where=where if isinstance(where, str) else None,
                dead=p.state == ProbeState.DEAD,
                last_seen=p.last_seen,
            )
        )
    out = []
    dead = {e.rank for e in evidence if e.dead}
    report = analyze_hang(job_id, evidence, now, min_wait_s=threshold)
    for f in report.findings:
        rule = RULES.get(f.kind)
        if rule is None or (f.kind is FindingKind.FAILED and f.ranks and dead >= set(f.ranks)):
            continue  # failed for want of a dead peer: the hub raises deaths, once per job
        out.append(
            Alert(
                rule=rule[0],
                severity=rule[1],
                message=f.message[:240],
                time=now,
                rank=f.ranks[0] if len(f.ranks) == 1 else None,
                group=group or None,
                job_id=job_id,
            )
        )
    return out


@dataclass
class GroupJudge:
    """One per process: `tick()` from the watchdog's loop, which returns at once unless due."""

    hub: HubReader = field(default_factory=HubReader)
    gate: AlertGate = field(default_factory=lambda: AlertGate(COOLDOWN_S))
    at: float = 0.0
    every: float = JUDGE_EVERY_S
    motions: dict[int, Mark] = field(default_factory=dict)
    """What the previous look saw of each rank (empty when there was none)."""

    def tick(self, now: float | None = None) -> None:
        with contextlib.suppress(Exception):
            self._tick(time.time() if now is None else now)

    def _tick(self, now: float) -> None:
        ctx = get_context()
        urgent = _failed.is_set()  # a collective of this process raised: look now
        _failed.clear()
        if ctx.rank is None or ctx.rank >= FALLBACK_RANKS:
            return
        since = oldest_call_start()  # this rank waits in a collective: its group may hang
        waiting = since is not None and now - since >= WAIT_FLOOR_S - 2 * JUDGE_EVERY_S
        every = self.every if waiting or self.motions else JUDGE_EVERY_LARGE_S
        if now - self.at < every and not urgent:
            return
        self.at = now
        group = ctx.group or ""
        lean = self.hub.list_probes(ctx.job_id, [])
        if not lean or not judges_group(ctx.rank, ctx.group, lean):
            return
        mine = [p for p in lean if (p.context.group or "") == group]
        self.every = JUDGE_EVERY_LARGE_S if len(mine) > LARGE_GROUP else JUDGE_EVERY_S
        threshold = wait_threshold(_step_times(mine))
        alerts: list[Alert] = []
        early = threshold - self.every  # a turn early: see it move
        if urgent or needs_a_look(mine, group, now, early):
            full = self.hub.list_probes(ctx.job_id, SUMMARIES)
            if full is None:
                return
            full = [p for p in full if (p.context.group or "") == group]
            threshold = wait_threshold(_step_times(full))
            alerts = group_alerts(
                ctx.job_id or "", group, full, _groups(self.hub, ctx.job_id, group), now, threshold
            )
            motions = motions_of(full)
            alerts = stuck_only(alerts, self.motions, motions, _longest_wait(full, now))
            self.motions = motions
        else:
            self.motions = {}
        new, resolved = self.gate.update(alerts, now)
        if new or resolved:
            publish(new, resolved)


def motions_of(probes: Sequence[ProbeStatus]) -> dict[int, Mark]:
    """rank -> what this look sees of it (`hang.motion`), for the live ranks."""
    return {
        int(p.context.rank): mark_of(p)
        for p in probes
        if p.context.rank is not None and p.state != ProbeState.DEAD
    }


def stuck_only(
    alerts: Sequence[Alert],
    before: Mapping[int, Mark],
    after: Mapping[int, Mark],
    waited_s: float,
) -> list[Alert]:
    """The alerts less the hangs whose rank moved between the two looks (`hang.motion`): slow,
    not stuck, until the group waited SLOW_LIMIT_S. A hang with no earlier look to compare
    with, no motion known, or no heartbeat of its rank between the looks (a loaded node)
    waits for the next turn."""
    out = []
    for a in alerts:
        if a.rule == "hang" and a.rank is not None and waited_s < SLOW_LIMIT_S:
            then, now = before.get(a.rank), after.get(a.rank)
            if then is None or now is None or not now.motion or what_moved(then, now):
                continue
            if then.seen and then.seen == now.seen:  # no heartbeat between the looks (load)
                continue
        out.append(a)
    return out


def _longest_wait(probes: Sequence[ProbeStatus], now: float) -> float:
    since = [p.progress.waiting_since for p in probes if p.progress.waiting_since is not None]
    return now - min(since) if since else 0.0


def _step_times(probes: Sequence[ProbeStatus]) -> list[float]:
    out = []
    for p in probes:
        summary: Any = p.summaries.get("monitor")
        step_s = getattr(summary, "step_s", 0.0) or 0.0
        if step_s > 0:
            out.append(float(step_s))
    return out


def _groups(hub: HubReader, job_id: str | None, group: str) -> dict[str, tuple[int, ...]]:
    """The process groups' rank lists the hub keeps for this worker group (empty on failure:
    `analyze_hang` then takes the ranks seen in each group's records)."""
    try:
        import ray

        from rankscope.alerts.worker_judge import JUDGE_TIMEOUT_S

        if hub.hub is None or job_id is None:
            return {}
        by_group = ray.get(hub.hub.groups.remote(job_id), timeout=JUDGE_TIMEOUT_S)
        return dict(by_group.get(group) or by_group.get(group or None) or {})
    except Exception:
        return {}
