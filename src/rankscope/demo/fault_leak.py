"""`--fault leak`: one rank keeps a reference to a new buffer every step; rankscope names it.

The driver asks every rank's probe for its memory a few times a second while the job trains
(the `memory` command: nothing in the training code), runs the leak test on each rank's series,
prints the cluster view and writes the HTML report into the demo's run directory.
"""

from __future__ import annotations

import os
import time
from typing import Any

from rankscope.demo.model import Fault
from rankscope.demo.session import DemoSession

LEAK_BYTES_PER_STEP = 4 * 1024 * 1024
STEP_PAUSE_S = 0.15
"""The leaking rank's steps are slowed down so the demo can be watched (and sampled)."""
SAMPLE_INTERVAL_S = 0.2
MIN_SAMPLES = 6


def inject(worker: Any, step: int) -> None:
    """Runs in the faulty rank every step: a list that only grows, like a list of losses
    that still hold their graphs."""
    kept = worker.__dict__.setdefault("_kept_per_step", [])
    kept.append(b"\x01" * LEAK_BYTES_PER_STEP)  # written, so the pages are really resident
    time.sleep(STEP_PAUSE_S)


def diagnose(session: DemoSession) -> bool:
    import ray

    from rankscope.cli.output import to_json
    from rankscope.memory import analysis
    from rankscope.memory.collect import collect
    from rankscope.memory.collect_profile import COMMAND, ProfileArtifact
    from rankscope.memory.io_report import ProcessSection, write_report
    from rankscope.memory.model import MemorySnapshot, RankMemoryReply
    from rankscope.memory.render import render

    probes = session.ranked_probes()
    job_id = probes[0].context.job_id
    series: dict[str, list[MemorySnapshot]] = {}
    thresholds = analysis.LeakThresholds(warmup=0, min_points=MIN_SAMPLES)
    session.console.print("sampling every rank's memory through its probe while it trains...")
    while True:
        done, _ = ray.wait(session.runs, num_returns=len(session.runs), timeout=0)
        collect(session.client, job_id, probes, watched=series)
        if len(done) == len(session.runs):
            break
        time.sleep(SAMPLE_INTERVAL_S)
    ray.get(session.runs)
    by_probe = {p.info.probe_id: p for p in probes}
    leaking: list[int] = []
    rows, sections = [], []
    for probe_id, snapshots in series.items():
        ctx = by_probe[probe_id].context
        finding = analysis.detect_leak("rss", snapshots, thresholds)
        if finding.leak and ctx.rank is not None:
            leaking.append(ctx.rank)
        rows.append(
            analysis.RankMemory(
                ctx.label,
                ctx.rank,
                ctx.node_ip or ctx.hostname,
                ctx.pid,
                snapshots[-1],
                (finding,),
            )
        )
        sections.append(
            ProcessSection(
                f"{ctx.label} (pid {ctx.pid})",
                tuple(snapshots),
                leaks=(finding,),
                node=ctx.node_ip or ctx.hostname,
            )
        )
    view = analysis.cluster_view(job_id, rows)
    session.console.print(render(view))
    replies = [
        RankMemoryReply(snapshots[-1], history=tuple(snapshots), leaks=row.leaks)
        for row, snapshots in zip(rows, series.values(), strict=True)
    ]  # as `rankscope diagnose --mode memory_profile` writes them: `rankscope report` reads it
    session.client.write_artifact(
        job_id,
        f"memory-profile-{time.strftime('%Y%m%d-%H%M%S')}.json",
        to_json(COMMAND, ProfileArtifact(view, tuple(replies))),
    )
    path = write_report(
        os.path.join(session.run_dir, "memory-report.html"),
        f"rankscope demo: memory of job {job_id}",
        sorted(sections, key=lambda s: s.label),
        overview=True,
    )
    session.console.print(f"memory report: {path}")
    if leaking:
        names = ", ".join(f"rank {r}" for r in sorted(leaking))
        session.console.print(f"[bold red]leak[/]: {names} (injected: rank {session.fault_rank})")
    return sorted(leaking) == [session.fault_rank]


FAULT = Fault(
    "leak",
    "one rank keeps a 4 MiB buffer every step",
    diagnose,
    inject,
    command="rankscope memory",
)
