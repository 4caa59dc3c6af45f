"""`rankscope diagnose --mode memory_profile`: every rank's memory and verdicts, as JSON + HTML.

Both files go into the hub's run directory, under the job id, written through the hub (the run
directory is on its node), and their paths there are printed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.console import Console

from rankscope.memory.collect import JobMemory, cluster_memory
from rankscope.memory.render import render
from rankscope.memory.report import ProcessSection, render_report
from rankscope.runtime.client import HubClient

NO_PROFILER_NOTE = "no MemoryProfiler in this process: one snapshot"


@dataclass(frozen=True)
class MemoryProfileFiles:
    job_id: str
    json_path: str
    html_path: str


def memory_profile(address: str | None, job: str | None, as_json: bool, console: Console) -> int:
    """Snapshot every rank, write the verdicts; exit code 1 when a rank has a finding."""
    from rankscope.cli.output import to_json

    client = HubClient.attach(address)
    views = cluster_memory(address, job, history=True, client=client)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    written = [write_job(client, stamp, v) for v in views]
    if as_json:
        console.print_json(
            to_json(
                "diagnose.memory_profile",
                [{"files": f, "memory": v.view} for f, v in zip(written, views, strict=True)],
            )
        )
    else:
        for files, v in zip(written, views, strict=True):
            console.print(render(v.view))
            console.print(f"wrote {files.json_path}")
            console.print(f"wrote {files.html_path}")
    return 1 if any(v.view.has_findings for v in views) else 0


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
    """Both files into the run directory through the hub, as every other writer does: the run
    directory lives on the hub's node, not necessarily on the machine the CLI runs on."""
    from rankscope.cli.output import to_json

    job_id = job.view.job_id or "no-job"
    base = f"memory-profile-{stamp}"
    payload = {"memory": job.view, "replies": list(job.replies.values())}
    json_path = client.write_artifact(
        job_id, base + ".json", to_json("diagnose.memory_profile", payload)
    )
    html = render_report(
        f"rankscope memory profile: job {job.view.job_id}", sections(job), overview=True
    )
    html_path = client.write_artifact(job_id, base + ".html", html)
    return MemoryProfileFiles(job.view.job_id, json_path, html_path)
