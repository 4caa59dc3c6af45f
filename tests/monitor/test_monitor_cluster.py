"""The monitor on a real Ray cluster with gloo and the demo's model: 3 ranks, one run with every
fault the issue names, then `rankscope monitor`, `rankscope top --json`, `rankscope alerts` (and
its webhook) and a Prometheus scrape."""

from __future__ import annotations

import json
import os
import time
import uuid

import pytest
import ray
from workers_monitor import MonitoredRank

import rankscope
from helpers.cluster import cluster_address, probes_by_pid, run_cli, wait_registered, webhook_server
from helpers.workers import WORKER_NODE_RESOURCE, form_group

STEPS = 80
pytestmark = pytest.mark.alone  # a 40 ms straggler and a 30% drift, told from the machine's load


@pytest.fixture(scope="module")
def hook():
    """A local webhook the ranks POST their alerts to: (its URL, the bodies received)."""
    with webhook_server() as server:
        yield server


@pytest.fixture(scope="module")
def monitored(cluster, hook):
    """Rank 2 sleeps 40 ms a step (in its `load_batch` span; no trace window: the monitor's own
    span sample finds the phase); rank 1 goes NaN at step 12 and enters all_reduce 100 ms late
    once, at step 60 (a sample, not a finding); rank 0's loss spikes 10x at step 30; from step
    50 every rank has 30% fewer tokens."""
    actor = ray.remote(num_cpus=0)(MonitoredRank)
    common = {"fewer_tokens_from": 50}
    actors = [
        actor.remote(0, 3, spike_step=30, **common),
        actor.remote(1, 3, nan_step=12, late_step=60, late_s=0.1, **common),
        actor.options(resources={WORKER_NODE_RESOURCE: 1}).remote(2, 3, sleep_s=0.04, **common),
    ]
    pids = ray.get([a.pid.remote() for a in actors], timeout=120)
    wait_registered(pids, ranked=True)
    ray.get([a.alert_to.remote(hook[0]) for a in actors], timeout=60)
    form_group(actors)
    ray.get([a.train.remote(STEPS) for a in actors], timeout=120)
    yield actors, pids
    for a in actors:
        ray.kill(a)


def test_monitor_names_every_fault(monitored):
    result = run_cli("monitor", "--address", cluster_address(), "--group", "monitored", "--json")
    assert result.returncode == 1, result.stderr
    (job,) = [j for j in json.loads(result.stdout)["data"] if j["ranks"] == 3]
    found = {(f["kind"], tuple(f["ranks"])): f for f in job["findings"]}
    (scores,) = job["stragglers"].values()
    drift = [f for (k, _), f in found.items() if k == "throughput_drift"]
    spike = found.get(("loss_spike", (0,)), {})
    nan = found.get(("non_finite", (1,)), {})
    late = [f for (k, r), f in found.items() if k == "collective_latency" and r == (1,)]
    slow = found.get(("straggler", (2,)), {}).get("evidence", "")
    problems = {
        "rank 2 is the straggler": "rank 2 computes" in slow,
        "slow in data loading": slow.startswith("rank 2 is ")
        and "slower: data loading (load_batch)" in slow,
        "rank 2 scores worst": scores[0]["rank"] == 2 and scores[0]["relative"] > 2,
        # last wherever the ranks waited (the other all_reduces of a step are ties)
        "rank 2 arrives last": scores[0]["last_arrival_share"] > 0.8,
        "drift at step 50": bool(drift) and all(f["step"] == 50 for f in drift),
        "drift of 30% fewer tokens": bool(drift)
        and "tokens per step 512 -> 358" in drift[0]["evidence"]
        and drift[0]["value"] < -0.15,
        "spike at step 30": spike.get("step") == 30,
        "first NaN on rank 1 at 12": nan.get("step") == 12,
        "in module 0": "activation in 0 (output)" in nan.get("evidence", ""),
        "rank 1 late once: no finding": not late,
    }
    assert all(problems.values()), (problems, job)


def test_top_json_lists_every_rank_worst_first(monitored):
    _actors, pids = monitored
    result = run_cli("top", "--address", cluster_address(), "--json")
    assert result.returncode == 0, result.stderr
    rows = [r for j in json.loads(result.stdout)["data"] for r in j["ranks"] if r["pid"] in pids]
    assert sorted(r["rank"] for r in rows) == [0, 1, 2]
    assert all(r["step"] == STEPS and r["tokens_per_s"] > 0 for r in rows)
    mine = [r["rank"] for r in rows]
    # rank 1's NaN spread to the others (more alerts there), rank 2 is the straggler
    assert mine[0] in (1, 2), [(r["rank"], r["alerts"], r["straggler"]) for r in rows]
    status = run_cli("status", "--address", cluster_address(), env={"COLUMNS": "200"})
    # once: as the active alert rank 1 raised, not again as the monitor's heartbeat line
    assert status.stdout.count("first nan activation in 0 (output) at step 12") == 1, status.stdout


def test_alerts_name_the_straggler_and_the_nan_rank_and_post_them(monitored, hook):
    """Rank 1's first NaN and rank 2 the straggler (judged by the group's rank 0 from the
    heartbeats, every 10 s; a straggler once it persisted 20 s) and rank 0's 30% fewer tokens
    from step 50 (its own) are active alerts, in `rankscope status`, and POSTed."""
    _actors, pids = monitored
    wanted = {("straggler", 2), ("non_finite", 1), ("throughput_drift", 0)}
    deadline = time.time() + 70  # a straggler is raised once three judge turns saw it
    while True:
        result = run_cli("alerts", "--address", cluster_address(), "--json")
        data = json.loads(result.stdout)["data"]
        ours = [a for j in data for a in j["alerts"] if a["pid"] in pids and a["active"]]
        if wanted <= {(a["rule"], a["rank"]) for a in ours} or time.time() > deadline:
            break
        time.sleep(2)
    assert result.returncode == 1, result.stderr
    by_rule = {(a["rule"], a["rank"]): a for a in ours}
    assert wanted <= set(by_rule), ours
    nan, slow = by_rule[("non_finite", 1)], by_rule[("straggler", 2)]
    assert nan["severity"] == "critical"
    # the inf's gradients reach every rank through all_reduce: the others go non-finite after
    # it, and the message adds them when their heartbeats said so before the judge's turn
    first = "rank 1 saw the first nan activation in 0 (output) at step 12"
    assert nan["message"].startswith(first), nan
    assert slow["message"].startswith("rank 2 computes"), slow
    drop = by_rule[("throughput_drift", 0)]
    assert drop["severity"] == "warning" and "dropped" in drop["message"], drop
    assert "at step 50" in drop["message"] and "tokens per step 512 -> 358" in drop["message"]
    posted = {(b["rule"], b["rank"]) for b in hook[1]}
    assert wanted <= posted, hook[1]
    status = run_cli("status", "--address", cluster_address(), env={"COLUMNS": "200"})
    assert f"alert [critical]: {nan['message']}" in status.stdout, status.stdout
    assert "alert [warning]: rank 2 computes" in status.stdout, status.stdout
    assert "alert: rank 2 computes" not in status.stdout  # not again as a heartbeat line


class Stepper:
    """A rank that steps on its own, with no collective (as rollout or reward workers do)."""

    def __init__(self, rank: int, group: str) -> None:
        rankscope.init(rank=rank, world_size=3, group=group)

    def pid(self) -> int:
        return os.getpid()

    def step_for(self, seconds: float) -> int:
        steps, end = 0, time.time() + seconds
        while time.time() < end:
            time.sleep(0.05)
            rankscope.step(loss=1.0)
            steps += 1
        return steps


def test_a_rank_silent_while_its_group_steps_is_raised_without_anyone_asking(cluster, hook):
    """The group's rank 0 judges the silent-rank rule from the heartbeats and POSTs it, before
    any `rankscope alerts`; the command then lists it once, not again from its own reading."""
    group = f"silent-{uuid.uuid4().hex[:6]}"
    env = {"RANKSCOPE_ALERT_SILENT_AFTER_S": "3", "RANKSCOPE_ALERT_WEBHOOK": hook[0]}
    actor = ray.remote(num_cpus=0)(Stepper).options(runtime_env={"env_vars": env})
    ranks = [actor.remote(r, group) for r in range(3)]
    pids = ray.get([r.pid.remote() for r in ranks], timeout=120)
    try:
        wait_registered(pids, ranked=True)
        ray.get([r.step_for.remote(1.0) for r in ranks], timeout=60)
        going = [r.step_for.remote(25.0) for r in ranks[:2]]  # rank 2 goes silent
        deadline = time.time() + 25
        while not any(b["rule"] == "silent_rank" and b["group"] == group for b in hook[1]):
            assert time.time() < deadline, hook[1]
            time.sleep(0.5)
        posted = [b for b in hook[1] if b["rule"] == "silent_rank" and b["group"] == group]
        assert [b["rank"] for b in posted] == [2], posted
        assert posted[0]["message"].endswith("while ranks 0,1 continue"), posted
        result = run_cli("alerts", "--address", cluster_address(), "--json")
        assert result.returncode == 1, result.stderr
        listed = [
            a
            for j in json.loads(result.stdout)["data"]
            for a in j["alerts"]
            if a["rule"] == "silent_rank" and a["group"] == group
        ]
        assert [a["rank"] for a in listed] == [2], listed
        ray.get(going, timeout=60)
    finally:
        for r in ranks:
            ray.kill(r)


def test_prometheus_scrape_has_the_metrics_with_the_rank_label(monitored):
    import socket
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    from rankscope.monitor.worker_prometheus import start_exporter

    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    exporter = start_exporter(port)
    try:
        assert ray.get(exporter.port.remote(), timeout=60) == port
        url = f"http://127.0.0.1:{port}/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        families = {f.name: f for f in text_string_to_metric_families(text)}
        job = ray.get_runtime_context().get_job_id()
        group = str(probes_by_pid(monitored[1])[monitored[1][0]].context.group)

        def ours(sample: object) -> bool:  # earlier tests' groups of this job have ranks too
            labels = sample.labels  # type: ignore[attr-defined]
            return labels["job"] == job and labels["group"] == group

        steps = {s.labels["rank"]: s.value for s in families["rankscope_step"].samples if ours(s)}
        assert steps == {"0": STEPS, "1": STEPS, "2": STEPS}, text[:2000]
        scores = {
            s.labels["rank"]: s.value
            for s in families["rankscope_straggler_score"].samples
            if ours(s)
        }
        assert max(scores, key=scores.__getitem__) == "2"
        assert {"rankscope_tokens_per_second", "rankscope_loss", "rankscope_alerts"} <= set(
            families
        )
    finally:
        ray.kill(exporter)


def test_comm_bench_refuses_a_live_jobs_nodes_then_measures_with_live(monitored):
    refused = run_cli("comm-bench", "--address", cluster_address(), "--budget", "2")
    assert refused.returncode == 2 and "--live" in refused.stderr, refused.stderr
    result = run_cli(
        "comm-bench", "--address", cluster_address(), "--live", "--budget", "2",
        "--max-bytes", "262144", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    bench = json.loads(result.stdout)["data"]
    assert bench["backend"] == "gloo" and len(bench["nodes"]) == 2
    assert "live" in bench["note"]
    ops = {c["op"] for c in bench["collectives"]}
    assert ops == {"all_reduce", "all_gather"}
    assert all(c["busbw_gbs"] > 0 for c in bench["collectives"])
    (pair,) = bench["pairs"]
    assert pair["latency_s"] > 0 and pair["bandwidth_gbs"] > 0
