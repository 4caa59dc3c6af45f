"""The cluster view: ask every rank's probe for its memory, one table sorted by headroom."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from rankscope.analysis import memory as analysis
from rankscope.memory.handler import RankMemoryReply
from rankscope.memory.records import MemorySnapshot
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeState, ProbeStatus

DEFAULT_DEADLINE_S = 3.0
WATCH_HISTORY = 600
HOST_ALERT = analysis.MemoryThresholds().host_alert
DEVICE_ALERT = analysis.MemoryThresholds().device_alert
"""Snapshots per rank kept by `--watch` for its own trend test."""


@dataclass(frozen=True)
class JobMemory:
    """One job's cluster view and the raw replies (for the report)."""

    view: analysis.ClusterMemory
    replies: dict[str, RankMemoryReply]
    """By probe id."""
    probes: tuple[ProbeStatus, ...]


def jobs(client: HubClient, job: str | None) -> dict[str, list[ProbeStatus]]:
    return client.jobs(job)


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
) -> list[JobMemory]:
    client = client or HubClient.attach(address)
    return [
        collect(client, job_id, probes, deadline_s=deadline_s, history=history, watched=watched)
        for job_id, probes in jobs(client, job).items()
    ]


def watch_views(
    address: str | None,
    job: str | None,
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
    try:
        while rounds is None or done < rounds:
            started = time.monotonic()
            last = cluster_memory(address, job, client=client, watched=watched)
            show(last)
            done += 1
            time.sleep(max(0.0, interval_s - (time.monotonic() - started)))
    except KeyboardInterrupt:
        pass
    return last


# ------------------------------------------------------------------ render
def render(view: analysis.ClusterMemory) -> RenderableType:
    """The table (CUDA columns only when some rank has a device), then alerts and leaks."""
    hb = analysis.human_bytes
    has_cuda = any(r.snapshot is not None and r.snapshot.cuda is not None for r in view.ranks)
    table = Table(
        title=f"job {view.job_id}: memory of {len(view.ranks)} processes (least headroom first)",
        title_justify="left",
    )
    columns = ["rank", "node", "pid", "RSS", "USS", "node"]
    if has_cuda:
        columns += ["alloc", "reserved", "GPU"]
    columns += ["free", "leak"]
    for c in columns:
        table.add_column(c, justify="left" if c in ("node", "leak") else "right", no_wrap=True)
    for r in view.ranks:
        s = r.snapshot
        head = ["-" if r.rank is None else str(r.rank), r.node, str(r.pid)]
        if s is None:
            table.add_row(*head, Text(r.error or "no snapshot", style="red"))
            continue
        cells: list[str | Text] = [
            *head,
            hb(s.rss),
            hb(s.uss) if s.uss is not None else "-",
            _pct_text(r.host_used_fraction, HOST_ALERT),
        ]
        if has_cuda:
            cuda = s.cuda
            cells += [
                hb(cuda.allocated) if cuda is not None else "-",
                hb(cuda.reserved) if cuda is not None else "-",
                _pct_text(r.device_used_fraction, DEVICE_ALERT),
            ]
        leak = next((f for f in r.leaks if f.leak), None)
        cells += [
            f"{100 * r.headroom:.0f}%" if r.headroom is not None else "-",
            Text(f"+{hb(leak.per_step)}/step", style="bold red")
            if leak is not None
            else Text("no" if r.leaks else "-", style="green" if r.leaks else "dim"),
        ]
        table.add_row(*cells)
    parts: list[RenderableType] = [table]
    for r, alert in view.alerts:
        line = f"{r.label}: {alert.verdict.value}: {alert.message}"
        parts.append(Text(line, style="bold yellow"))
        parts.append(Text(f"    {alert.advice}", style="dim"))
    for r in view.leaking:
        for lf in r.leaks:
            if lf.leak:
                parts.append(Text(f"{r.label}: {analysis.describe_leak(lf)}", style="bold red"))
    parts.append(
        Text(
            "node: node RAM used; GPU: device used as the driver sees it; "
            "free: the smaller free share of node RAM and GPU",
            style="dim",
        )
    )
    return Group(*parts)


def _pct_text(fraction: float | None, alert: float) -> Text:
    if fraction is None:
        return Text("-")
    return Text(f"{100 * fraction:.0f}%", style="bold red" if fraction > alert else "")


def json_rows(views: Sequence[JobMemory]) -> list[analysis.ClusterMemory]:
    return [v.view for v in views]


WATCH_INTERVAL_S = 2.0


def run_memory(
    address: str | None, job: str | None, *, watch: bool, as_json: bool, console: Console
) -> int:
    """`rankscope memory`: exit code 1 when a rank has an alert, a leak or no answer."""
    from rankscope.cli.render import to_json

    if not watch:
        views = cluster_memory(address, job)
        if as_json:
            console.print_json(to_json("memory", json_rows(views)))
        else:
            for v in views:
                console.print(render(v.view))
        return _exit_code(views)
    if as_json:
        last = watch_views(
            address,
            job,
            interval_s=WATCH_INTERVAL_S,
            show=lambda views: console.print(to_json("memory", json_rows(views)), soft_wrap=True),
        )
        return _exit_code(last)
    from rich.live import Live

    with Live(console=console, auto_refresh=False) as live:
        last = watch_views(
            address,
            job,
            interval_s=WATCH_INTERVAL_S,
            show=lambda views: live.update(Group(*(render(v.view) for v in views)), refresh=True),
        )
    return _exit_code(last)


def _exit_code(views: Sequence[JobMemory]) -> int:
    return 1 if any(v.view.has_findings for v in views) else 0
