"""Gathering hang evidence cluster-wide and turning it into a report (CLI and watchdog)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection

from rankscope.hang.analysis import DEFAULT_MIN_WAIT_S, RankEvidence, analyze_hang
from rankscope.hang.io_death import find_deaths
from rankscope.hang.model import DeathKind, HangReport, RecorderSnapshot
from rankscope.hang.worker import INLINE_RANKS, WINDOW_PER_GROUP
from rankscope.hang.worker_flight import merge_flight
from rankscope.runtime import deadlines
from rankscope.runtime.ask import Answers, Command, Selection, ask, select
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeState, ProbeStatus
from rankscope.runtime.selection import by_group
from rankscope.stacks.collect import children_stacks, pyspy_all, unanswered
from rankscope.stacks.model import active_thread, headline


def hang_report(
    client: HubClient,
    job_id: str,
    probes: list[ProbeStatus],
    *,
    min_wait_s: float = DEFAULT_MIN_WAIT_S,
    deadline_s: float = deadlines.HANG_S,
    group: str | None = None,
) -> HangReport:
    """Ask every ranked probe for its recorder and where it is; use last words for the silent.

    `probes` are one group's (ranks are unique within a group); `group` names it in the report.
    """
    ranked = [p for p in probes if p.context.rank is not None]
    ranked = _newest_per_rank(ranked)
    live = [p for p in ranked if p.state != ProbeState.DEAD]
    window = {"per_group": WINDOW_PER_GROUP} if len(live) > INLINE_RANKS else None
    snapshots: dict[str, RecorderSnapshot] = {}
    where: dict[str, str] = {}
    if live:  # recorders, whereabouts and child processes in one round trip
        recorders, located, kids = ask(
            client,
            live,
            [Command("collectives", window), Command("where"), Command("children")],
            deadline_s,
        )
        snapshots = recorders.payloads()
        where = whereabouts(located, kids)
    refreshed = _with_last_summaries(client, job_id, ranked, answered=snapshots)
    dead = [p for p in ranked if p.state == ProbeState.DEAD]
    deaths = find_deaths(dead) if dead else {}
    known = client.groups(job_id) if ranked else {}  # summaries carry no rank lists
    evidence = []
    for row in ranked:
        pid = row.info.probe_id
        p = refreshed.get(pid, row)
        snapshot = snapshots.get(pid) or p.summaries.get("collectives")
        if not isinstance(snapshot, RecorderSnapshot):
            snapshot = RecorderSnapshot((), {}, 0, False)
        evidence.append(
            RankEvidence(
                rank=p.context.rank or 0,
                records=merge_flight(snapshot.records, snapshot.flight),
                groups=_with_known_groups(
                    _with_flight_groups(snapshot), known.get(p.context.group or "", {})
                ),
                where=where.get(pid) or p.summaries.get("where"),
                dead=p.state == ProbeState.DEAD,
                death=deaths[pid].cause if pid in deaths else "",
                death_kind=deaths[pid].kind if pid in deaths else DeathKind.UNKNOWN,
                died_at=deaths[pid].died_at if pid in deaths else None,
                last_seen=p.last_seen,
                paused=snapshot.paused,
            )
        )
    return dataclasses.replace(analyze_hang(job_id, evidence, time.time(), min_wait_s), group=group)


def whereabouts(located: Answers, kids: Answers) -> dict[str, str]:
    """Where each rank is, by probe id: its own answer, else py-spy's; then where the child
    processes it started are (an engine's whereabouts say what the rank waits for)."""
    by_id = {p.info.probe_id: p for p in located.asked}
    where = {pid: payload for pid, payload in located.payloads().items() if payload}
    for s in [*pyspy_all(unanswered(located)), *children_stacks(kids, by_id)]:
        thread = active_thread(s.threads)
        if thread is None:
            continue
        if s.parent is None:
            where[s.status.info.probe_id] = headline(thread.frames)
        elif s.parent.info.probe_id in where:
            ctx = s.status.context
            where[s.parent.info.probe_id] += (
                f"; its child pid {ctx.pid} ({ctx.actor_class}) is in {headline(thread.frames)}"
            )
    return where


def _with_flight_groups(snapshot: RecorderSnapshot) -> dict[str, tuple[int, ...]]:
    """rankscope's groups, and those only torch's flight recorder saw: with their ranks when
    it knows them (NCCL), else () (the analysis then takes the ranks that called into it)."""
    flight_only = {r.group for r in snapshot.flight if not r.p2p} - set(snapshot.groups)
    seen = {name: snapshot.flight_groups.get(name, ()) for name in sorted(flight_only)}
    return {**seen, **snapshot.groups}


def _with_known_groups(
    groups: dict[str, tuple[int, ...]], known: dict[str, tuple[int, ...]]
) -> dict[str, tuple[int, ...]]:
    """A rank's groups and the rank lists the hub keeps for its worker group (heartbeat
    summaries carry none); a list the rank sent itself wins."""
    out = dict(groups)
    for name, ranks in known.items():
        if ranks and not out.get(name):
            out[name] = ranks
    return out


def _newest_per_rank(probes: list[ProbeStatus]) -> list[ProbeStatus]:
    """A restarted rank registers again; its newest process speaks for it, unless all died."""
    best: dict[int, ProbeStatus] = {}
    for p in sorted(probes, key=lambda p: (p.state != ProbeState.DEAD, p.registered_at)):
        best[p.context.rank or 0] = p
    return sorted(best.values(), key=lambda p: p.context.rank or 0)


HEARTBEAT_EVIDENCE = ["collectives", "where"]
"""The heartbeat summaries that stand in for a live rank that did not answer."""


def _with_last_summaries(
    client: HubClient, job_id: str, ranked: list[ProbeStatus], answered: Collection[str]
) -> dict[str, ProbeStatus]:
    """The rows of the live ranks that did not answer, with their last heartbeat's evidence,
    when the caller read the registry without it (`hang_reports` reads no summaries: at 4,096
    ranks they are megabytes through the hub, and the answers make them moot)."""
    silent = [
        p.info.probe_id
        for p in ranked
        if p.state != ProbeState.DEAD
        and p.info.probe_id not in answered
        and not all(k in p.summaries for k in HEARTBEAT_EVIDENCE)
    ]
    if not silent:
        return {}
    rows = client.probes(job_id, summaries=HEARTBEAT_EVIDENCE, probe_ids=silent)
    return {p.info.probe_id: p for p in rows}


def hang_reports(
    address: str | None,
    selection: Selection,
    *,
    min_wait_s: float = DEFAULT_MIN_WAIT_S,
    client: HubClient | None = None,
) -> list[HangReport]:
    """`rankscope hang`: one report per selected job, or per group when a job has several."""
    client = client or HubClient.attach(address)
    reports = []
    for job_id, probes in select(client, selection, summaries=[]).items():
        groups = by_group(probes)
        for name, members in groups.items():
            label = name if len(groups) > 1 or selection.group is not None else None
            reports.append(hang_report(client, job_id, members, min_wait_s=min_wait_s, group=label))
    return reports
