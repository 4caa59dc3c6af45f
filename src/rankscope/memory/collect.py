"""The cluster view: ask every rank's probe for its memory; `--watch` keeps a trend of its own."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rankscope.memory import analysis
from rankscope.memory.model import MemorySnapshot, RankMemoryReply
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeState, ProbeStatus
from rankscope.runtime.selection import filter_jobs_by_group

DEFAULT_DEADLINE_S = 3.0
WATCH_HISTORY = 600
"""Snapshots per rank kept by `--watch` for its own trend test."""


@dataclass(frozen=True)
class JobMemory:
    """One job's cluster view and the raw replies (for the report)."""

    view: analysis.ClusterMemory
    replies: dict[str, RankMemoryReply]
    """By probe id."""
    probes: tuple[ProbeStatus, ...]


def jobs(
    client: HubClient, job: str | None, group: str | None = None
) -> dict[str, list[ProbeStatus]]:
    return filter_jobs_by_group(client.jobs(job), group)


def collect(
    client: HubClient,
    job_id: str,
    probes: Sequence[ProbeStatus],
    *,
    deadline_s: float = DEFAULT_DEADLINE_S,
    history: bool = False,
    watched: dict[str, list[MemorySnapshot]] | None = None,
    thresholds: analysis.MemoryThresholds | None = None,
) -> JobMemory:
    """Every rank's memory now; `watched` (by probe id) adds the caller's own history."""
    live = [p for p in probes if p.state != ProbeState.DEAD]
    replies: dict[str, RankMemoryReply] = {}
    errors: dict[str, str] = {}
    if live:
        result = client.fan_out("memory", live, args={"history": history}, deadline_s=deadline_s)
        for reply in result.replies:
            if reply.ok and isinstance(reply.payload, RankMemoryReply):
                replies[reply.probe_id] = reply.payload
            else:
                errors[reply.probe_id] = reply.error or "unexpected reply"
        for p in result.missing:
            errors[p.info.probe_id] = f"no answer within {deadline_s:g}s"
    for p in probes:
        if p.state == ProbeState.DEAD:
            errors[p.info.probe_id] = "process is dead"
    rows = []
    for p in probes:
        pid = p.info.probe_id
        got = replies.get(pid)
        leaks: tuple[analysis.LeakFinding, ...] = ()
        if got is not None and watched is not None:
            series = watched.setdefault(pid, [])
            series.append(got.snapshot)
            del series[:-WATCH_HISTORY]
        if got is not None and got.has_profiler:
            leaks = got.leaks
        elif watched is not None and pid in watched:
            leaks = analysis.detect_leaks(watched[pid], metrics=("rss",))
        ctx = p.context
        rows.append(
            analysis.RankMemory(
                label=ctx.label,
                rank=ctx.rank,
                node=ctx.node_ip or ctx.hostname,
                pid=ctx.pid,
                snapshot=got.snapshot if got is not None else None,
                leaks=leaks,
                error=errors.get(pid, ""),
                group=ctx.group,
            )
        )
    view = analysis.cluster_view(job_id, rows, thresholds)
    return JobMemory(view, replies, tuple(probes))


def cluster_memory(
    address: str | None,
    job: str | None,
    *,
    deadline_s: float = DEFAULT_DEADLINE_S,
    history: bool = False,
    client: HubClient | None = None,
    watched: dict[str, list[MemorySnapshot]] | None = None,
    group: str | None = None,
) -> list[JobMemory]:
    client = client or HubClient.attach(address)
    return [
        collect(client, job_id, probes, deadline_s=deadline_s, history=history, watched=watched)
        for job_id, probes in jobs(client, job, group).items()
    ]


def watch_views(
    address: str | None,
    job: str | None,
    *,
    interval_s: float,
    show: Callable[[list[JobMemory]], None],
    rounds: int | None = None,
    group: str | None = None,
) -> list[JobMemory]:
    """Refresh every `interval_s` until interrupted (or `rounds` times); returns the last view."""
    client = HubClient.attach(address)
    watched: dict[str, list[MemorySnapshot]] = {}
    last: list[JobMemory] = []
    done = 0
    try:
        while rounds is None or done < rounds:
            started = time.monotonic()
            last = cluster_memory(address, job, client=client, watched=watched, group=group)
            show(last)
            done += 1
            time.sleep(max(0.0, interval_s - (time.monotonic() - started)))
    except KeyboardInterrupt:
        pass
    return last
