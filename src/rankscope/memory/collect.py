"""The cluster view: ask every rank's probe for its memory; `--watch` keeps a trend of its own."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rankscope.memory import analysis
from rankscope.memory.model import MemorySnapshot, RankMemoryReply
from rankscope.runtime import deadlines
from rankscope.runtime.ask import Command, Selection, ask_one, select
from rankscope.runtime.client import HubClient
from rankscope.runtime.interrupt import interrupted, until_interrupted
from rankscope.runtime.protocol import ProbeStatus

NO_ANSWER = "no answer within {deadline}s"
WATCH_HISTORY = 600
"""Snapshots per rank kept by `--watch` for its own trend test."""


@dataclass(frozen=True)
class JobMemory:
    """One job's cluster view and the raw replies (for the report)."""

    view: analysis.ClusterMemory
    replies: dict[str, RankMemoryReply]
    """By probe id."""
    probes: tuple[ProbeStatus, ...]


def collect(
    client: HubClient,
    job_id: str,
    probes: Sequence[ProbeStatus],
    *,
    deadline_s: float = deadlines.MEMORY_S,
    history: bool = False,
    points: int | None = None,
    watched: dict[str, list[MemorySnapshot]] | None = None,
    thresholds: analysis.MemoryThresholds | None = None,
) -> JobMemory:
    """Every rank's memory now; `watched` (by probe id) adds the caller's own history."""
    args = {"history": history, **({"points": points} if points else {})}
    command = Command("memory", args, expect=RankMemoryReply)
    answers = ask_one(client, probes, command, deadline_s)
    replies = {pid: _with_trend_leaks(r) for pid, r in answers.payloads().items()}
    errors = {p.info.probe_id: why for p, why in answers.unanswered(silent=NO_ANSWER)}
    errors.update((p.info.probe_id, "process is dead") for p in answers.dead)
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
    selection: Selection,
    *,
    deadline_s: float = deadlines.MEMORY_S,
    history: bool = False,
    client: HubClient | None = None,
    watched: dict[str, list[MemorySnapshot]] | None = None,
) -> list[JobMemory]:
    """`rankscope memory`: every selected job's ranks' memory now, and the verdicts."""
    client = client or HubClient.attach(address)
    return [
        collect(client, job_id, probes, deadline_s=deadline_s, history=history, watched=watched)
        for job_id, probes in select(client, selection).items()
    ]


def watch_views(
    address: str | None,
    selection: Selection,
    *,
    interval_s: float,
    show: Callable[[list[JobMemory]], None],
    rounds: int | None = None,
) -> list[JobMemory]:
    """Refresh every `interval_s` until interrupted (or `rounds` times); returns the last view."""
    client = HubClient.attach(address)
    watched: dict[str, list[MemorySnapshot]] = {}
    last: list[JobMemory] = []
    done = 0
    with until_interrupted():
        while (rounds is None or done < rounds) and not interrupted():
            started = time.monotonic()
            last = cluster_memory(address, selection, client=client, watched=watched)
            show(last)
            done += 1
            time.sleep(max(0.0, interval_s - (time.monotonic() - started)))
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
