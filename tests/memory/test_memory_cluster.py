"""Memory across a real Ray cluster: per-rank leak tests, `rankscope memory`, the diagnose mode
and the leak demo."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import ray
from workers_memory import CHUNK, MemoryRank

from helpers.cluster import cluster_address, run_cli, wait_registered
from helpers.workers import WORKER_NODE_RESOURCE

STEPS = 60  # ten sawtooth periods: enough troughs to tell a one-off rise from a leak
KINDS = ("steady", "leak", "sawtooth")


@pytest.fixture(scope="module")
def memory_ranks(cluster):
    """Rank 1 leaks CHUNK bytes a step; rank 2 (on the second node) is a sawtooth."""
    actor = ray.remote(num_cpus=0)(MemoryRank)
    actors = [
        actor.remote(0, 3, "steady"),
        actor.remote(1, 3, "leak"),
        actor.options(resources={WORKER_NODE_RESOURCE: 1}).remote(2, 3, "sawtooth"),
    ]
    pids = ray.get([a.pid.remote() for a in actors], timeout=120)
    wait_registered(pids, ranked=True)
    reports = ray.get([a.train.remote(STEPS) for a in actors], timeout=120)
    yield actors, pids, reports
    for a in actors:
        ray.kill(a)


def test_leak_on_the_leaking_rank_only_with_its_rate(memory_ranks):
    _actors, _pids, reports = memory_ranks
    verdicts = dict(zip(KINDS, reports, strict=True))
    assert not verdicts["steady"].leak_detected, verdicts["steady"].summary()
    assert not verdicts["sawtooth"].leak_detected, verdicts["sawtooth"].summary()
    leak = verdicts["leak"]
    assert leak.leak_detected, leak.summary()
    (rss,) = [f for f in leak.leaks if f.metric == "rss"]
    assert rss.per_step == pytest.approx(CHUNK, rel=0.2)
    assert rss.seconds_to_full is not None and rss.seconds_to_full > 0


def test_memory_json_lists_every_rank_and_flags_the_leak(memory_ranks):
    _actors, pids, _reports = memory_ranks
    result = run_cli("memory", "--address", cluster_address(), "--json")
    assert result.returncode == 1, result.stderr  # a leak is a finding
    doc = json.loads(result.stdout)
    assert doc["command"] == "memory"
    rows = {r["pid"]: r for job in doc["data"] for r in job["ranks"]}
    mine = {pid: rows[pid] for pid in pids}
    assert [mine[p]["rank"] for p in pids] == [0, 1, 2]
    for pid in pids:
        snap = mine[pid]["snapshot"]
        assert snap["rss"] > 0 and snap["node_total"] > 0 and snap["uss"] > 0
        assert mine[pid]["headroom"] is not None
    leaking = {r["rank"] for r in mine.values() if any(f["leak"] for f in r["leaks"])}
    assert leaking == {1}


def test_memory_table(memory_ranks):
    _actors, pids, _reports = memory_ranks
    result = run_cli("memory", "--address", cluster_address(), env={"COLUMNS": "160"})
    assert result.returncode == 1, result.stderr
    out = result.stdout
    assert "least headroom first" in out
    for pid in pids:
        assert str(pid) in out
    assert re.search(r"rank 1: process RSS leaks 2\.\d MiB/step", out)


def test_diagnose_memory_profile_writes_json_and_html(memory_ranks):
    _actors, pids, _reports = memory_ranks
    result = run_cli("diagnose", "--mode", "memory_profile", "--address", cluster_address())
    assert result.returncode == 1, result.stderr
    paths = re.findall(r"wrote (\S+)", result.stdout)
    json_path = next(p for p in paths if p.endswith(".json"))
    html_path = next(p for p in paths if p.endswith(".html"))
    assert os.path.dirname(json_path) == os.path.dirname(html_path)
    assert json_path.startswith(os.environ["RANKSCOPE_RUN_DIR"])
    with open(json_path) as f:
        doc = json.load(f)
    rows = {r["pid"]: r for r in doc["data"]["memory"]["ranks"]}
    assert set(pids) <= set(rows)
    histories = {len(r["history"]) for r in doc["data"]["replies"] if r["snapshot"]["pid"] in pids}
    assert histories == {STEPS}  # each rank's profiler sent its timeline
    with open(html_path, encoding="utf-8") as f:
        html = f.read()
    assert html.count("LEAK") == 1 and "rank 1 (pid" in html


def test_memory_watch_refreshes_until_interrupted(memory_ranks):
    _actors, pids, _reports = memory_ranks
    command = [sys.executable, "-m", "rankscope.cli.main", "memory", "--watch", "--json"]
    proc = subprocess.Popen(
        [*command, "--address", cluster_address()],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    docs: list[dict] = []
    buffer = ""
    decoder = json.JSONDecoder()
    deadline = time.time() + 60
    assert proc.stdout is not None
    while len(docs) < 2 and time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        buffer += line
        try:
            doc, _ = decoder.raw_decode(buffer.strip())
        except json.JSONDecodeError:
            continue
        docs.append(doc)
        buffer = ""
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=30)
    assert len(docs) == 2, err
    assert proc.returncode == 1, err  # the leak is still there
    for doc in docs:
        ranks = {r["pid"]: r["rank"] for job in doc["data"] for r in job["ranks"]}
        assert [ranks[p] for p in pids] == [0, 1, 2]
