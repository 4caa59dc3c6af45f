"""`rankscope report` through the hub of a live cluster: the registry, the events and the run
directory's reports read on the hub's node, and a live snapshot."""

from __future__ import annotations

import json
import os
import re
import signal

import ray
from typer.testing import CliRunner

import rankscope.cli.main as cli
from helpers.cluster import probes_by_pid, wait_registered
from helpers.workers import GlooRank, wait_until
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeState


def test_report_through_the_hub_names_the_dead_rank_and_reads_the_runs_reports(cluster, tmp_path):
    actor = ray.remote(num_cpus=0)(GlooRank)
    survivor, victim = (actor.remote(r, 42, explicit_rank=True) for r in (40, 41))
    pids = ray.get([survivor.pid.remote(), victim.pid.remote()])
    wait_registered(pids)
    ray.get(survivor.note.remote("checkpoint 7 saved"))
    ray.get(survivor.train.remote(30, 0.005))  # steps in the monitor's series, no loss
    os.kill(pids[1], signal.SIGKILL)
    wait_until(
        lambda: probes_by_pid([pids[1]])[pids[1]].state == ProbeState.DEAD,
        timeout=20,
        what="the hub to mark rank 41 dead",
    )
    job = ray.get_runtime_context().get_job_id()
    leak = {"metric": "rss", "leak": True, "reason": "grows 4.0 MiB/step"}
    profile = {
        "data": {
            "memory": {"ranks": [{"pid": pids[0], "label": "rank 40"}]},
            "replies": [
                {"snapshot": {"pid": pids[0], "rss": 1 << 30, "time": 1.0}, "leaks": [leak]}
            ],
        }
    }  # as `diagnose --mode memory_profile` writes it, through the hub into the run directory
    HubClient.attach().write_artifact(job, "memory-profile-test.json", json.dumps(profile))
    track = {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1,
             "args": {"name": "rank 40 (GlooRank) 10.0.0.9"}}  # fmt: skip
    span = {"ph": "X", "name": "load_batch", "pid": 1, "tid": 1, "ts": 0, "dur": 30000}
    marks = [{"ph": "i", "name": f"step {i}", "pid": 1, "tid": 1, "ts": i * 40000} for i in (0, 1)]
    trace = {"traceEvents": [track, span, *marks], "otherData": {"base_epoch_ns": 0}}
    HubClient.attach().write_artifact(job, "trace-test.json", json.dumps(trace))
    page = tmp_path / "page.html"
    try:
        wait_until(
            lambda: any(
                "checkpoint 7 saved" in str(e) for e in HubClient.attach().events(job, ["test."])
            ),
            what="the note in the run directory",
        )
        result = CliRunner().invoke(cli.app, ["report", "--job", job, "-o", str(page)])
    finally:
        ray.kill(survivor)
    assert result.exit_code == 1, result.output  # findings
    html = page.read_text()
    # the session's job holds every earlier test's dead ranks: look for ours on the timeline
    assert re.search(r"<td>rank 41</td>\s*<td class=\"alert\">died: Ray: worker died", html)
    assert "rank 40: rss leaks: grows 4.0 MiB/step" in html  # a report read on the hub's node
    assert "<td>test.note</td>" in html  # the events, read back through the hub
    assert 'id="section-stacks"' in html  # the live snapshot
    # the live series: the survivor's steps/s over steps (no loss given, and the page says so)
    assert 'aria-label="steps/s per rank over steps (running median of 5 steps)"' in html
    assert "no loss: pass it as rankscope.step(loss=...)" in html
    assert re.search(r"live diagnose: \d+ processes", html)  # the ranks' environments, live
    # the trace file the hub wrote, read back: 40 ms steps, 30 ms of them in load_batch
    assert re.search(r"<td>rank 40 \(GlooRank\) 10\.0\.0\.9</td>\s*<td>1</td>", html)
    assert "load_batch 30.0 ms (75%)" in html
