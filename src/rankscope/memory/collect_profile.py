"""The collect side of `rankscope diagnose --mode memory_profile`: snapshot every rank, and
write its JSON and HTML into the job's run directory through the hub (the run directory lives
on the hub's node, not necessarily on the machine the CLI runs on). `diagnose.py` prints it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rankscope.memory.analysis import ClusterMemory
from rankscope.memory.collect import JobMemory, cluster_memory
from rankscope.memory.io_report import ProcessSection, render_report
from rankscope.memory.model import RankMemoryReply
from rankscope.runtime.ask import Selection
from rankscope.runtime.client import HubClient

__all__ = ["MemoryProfile", "MemoryProfileFiles", "ProfileArtifact", "memory_profiles"]

NO_PROFILER_NOTE = "no MemoryProfiler in this process: one snapshot"
COMMAND = "diagnose.memory_profile"


@dataclass(frozen=True)
class MemoryProfileFiles:
    """Where one job's profile went, on the hub's node."""

    job_id: str
    json_path: str
    html_path: str


@dataclass(frozen=True)
class MemoryProfile:
    """One job's profile: its files and its memory view (what `--json` prints)."""

    files: MemoryProfileFiles
    memory: ClusterMemory


@dataclass(frozen=True)
class ProfileArtifact:
    """The profile's JSON file (`rankscope report` reads it): the view and every rank's reply."""

    memory: ClusterMemory
    replies: tuple[RankMemoryReply, ...]


def memory_profiles(address: str | None, selection: Selection) -> list[MemoryProfile]:
    """Snapshot every rank of the selected jobs, with history, and write each job's files."""
    client = HubClient.attach(address)
    views = cluster_memory(address, selection, history=True, client=client)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return [MemoryProfile(write_job(client, stamp, v), v.view) for v in views]


def sections(job: JobMemory) -> list[ProcessSection]:
    """One report section per rank: the profiler's history when it runs one, else the snapshot."""
    by_label = {r.label: r for r in job.view.ranks}
    out = []
    for p in job.probes:
        reply = job.replies.get(p.info.probe_id)
        row = by_label.get(p.context.label)
        if reply is None:
            continue
        history = reply.history or (reply.snapshot,)
        if reply.history and reply.history[-1].time < reply.snapshot.time:
            history = (*reply.history, reply.snapshot)
        out.append(
            ProcessSection(
                label=f"{p.context.label} (pid {p.context.pid})",
                snapshots=tuple(history),
                leaks=reply.leaks,
                findings=row.findings if row is not None else (),
                suspects=reply.suspects,
                node=p.context.node_ip or p.context.hostname,
                note="" if reply.has_profiler else NO_PROFILER_NOTE,
            )
        )
    return out


def write_job(client: HubClient, stamp: str, job: JobMemory) -> MemoryProfileFiles:
    """Both files into the run directory through the hub, as every other writer does."""
    from rankscope.cli.output import to_json

    job_id = job.view.job_id or "no-job"
    base = f"memory-profile-{stamp}"
    artifact = ProfileArtifact(job.view, tuple(job.replies.values()))
    json_path = client.write_artifact(job_id, base + ".json", to_json(COMMAND, artifact))
    html = render_report(
        f"rankscope memory profile: job {job.view.job_id}", sections(job), overview=True
    )
    html_path = client.write_artifact(job_id, base + ".html", html)
    return MemoryProfileFiles(job.view.job_id, json_path, html_path)
