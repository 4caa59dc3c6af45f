"""The cluster view: ask every rank's probe for its memory; `--watch` keeps a trend of its own."""

from __future__ import annotations

import dataclasses
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
    points: int | None = None,
    watched: dict[str, list[MemorySnapshot]] | None = None,
    thresholds: analysis.MemoryThresholds | None = None,
) -> JobMemory:
    """Every rank's memory now; `watched` (by probe id) adds the caller's own history."""
    live = [p for p in probes if p.state != ProbeState.DEAD]
    replies: dict[str, RankMemoryReply] = {}
    errors: dict[str, str] = {}
    if live:
        args = {"history": history, **({"points": points} if points else {})}
        result = client.fan_out("memory", live, args=args, deadline_s=deadline_s)
        for reply in result.replies:
            if reply.ok and isinstance(reply.payload, RankMemoryReply):
                replies[reply.probe_id] = _with_trend_leaks(reply.payload)
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
        if got is not None and (got.has_profiler or got.leaks):
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


TREND_LEAK = analysis.LeakThresholds(
    warmup=10, min_points=10, min_growth_bytes=64 * 2**20, min_growth_fraction=0.05
)
"""The leak test on a rank's heartbeat trend, which nobody asked for: a growth of 64 MiB and
5% at least, after ten heartbeats of training, so that a healthy job's start-up and the
allocator's settling are never called a leak."""


def _with_trend_leaks(reply: RankMemoryReply) -> RankMemoryReply:
    """A rank with no profiler sent its heartbeat trend: its RSS leak test, run here, over
    the heartbeats since its first step."""
    if reply.has_profiler or not reply.history:
        return reply
    training = [s for s in reply.history if s.step]
    found = analysis.detect_leaks(training, TREND_LEAK, metrics=("rss",))
    return dataclasses.replace(reply, leaks=found)
