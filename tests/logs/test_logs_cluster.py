"""Logs, alerts and levels on the real cluster through the real CLI: 4 ranks (one on the second
node) log; `rankscope logs` folds them with the numbers' spread, keeps a SIGKILL-ed rank's last
line; an ERROR burst and a memory rule raise alerts naming the rank, POSTed to a local webhook;
`rankscope level full --ranks 1 --for 4s` turns `debug_decorator` argument capture and DEBUG
records on for rank 1 only, then off."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest
import ray

from helpers.cluster import cluster_address, run_cli, wait_registered, webhook_server
from helpers.workers import WORKER_NODE_RESOURCE, wait_until
from helpers.workers_logs import LogRank

LOSSES = (0.52, 0.31, 0.4, 0.45)


@pytest.fixture(scope="module")
def webhook():
    with webhook_server() as server:
        yield server


@pytest.fixture(scope="module")
def ranks(cluster, webhook):
    """Rank 1 alerts above 1% host memory (so surely) and posts to the webhook."""
    url, _received = webhook
    actor = ray.remote(num_cpus=0)(LogRank)
    actors = [
        actor.remote(0, 4),
        actor.remote(1, 4, alert_threshold=0.01, webhook=url),
        actor.remote(2, 4),
        actor.options(resources={WORKER_NODE_RESOURCE: 1}).remote(3, 4),
    ]
    pids = ray.get([a.pid.remote() for a in actors], timeout=120)
    wait_registered(pids, ranked=True)
    job = ray.get(actors[0].job_id.remote())
    ray.get([a.log_step.remote(loss) for a, loss in zip(actors, LOSSES, strict=True)])
    yield actors, job
    for a in actors:
        ray.kill(a)


def _cli(job: str, *args: str, env: dict[str, str] | None = None):
    return run_cli(*args, "--address", cluster_address(), "--job", job, env=env)


def test_logs_fold_ranks_with_the_spread_and_raw_shows_every_line(ranks):
    _actors, job = ranks
    folded = _cli(job, "logs", "--grep", "loss=|grad norm", env={"COLUMNS": "200"})
    assert folded.returncode == 0, folded.stderr
    assert "INFO    ranks 0-3: loss=0.310..0.520 (x4)" in folded.stdout, folded.stdout
    assert "WARNING ranks 0-3: grad norm is large (x4)" in folded.stdout
    raw = _cli(job, "logs", "--grep", "loss=", "--raw", "--json")
    assert raw.returncode == 0, raw.stderr
    (result,) = json.loads(raw.stdout)["data"]
    assert sorted((ln["rank"], ln["message"]) for ln in result["lines"]) == [
        (r, f"loss={v:.3f}") for r, v in enumerate(LOSSES)
    ]
    printed = _cli(job, "logs", "--ranks", "3", "--grep", "plain print", "--raw", "--json")
    (result,) = json.loads(printed.stdout)["data"]
    assert [(ln["rank"], ln["source"]) for ln in result["lines"]] == [(3, "stdout")]


def test_error_burst_and_memory_alerts_name_the_rank_and_reach_the_webhook(ranks, webhook):
    actors, job = ranks
    _url, received = webhook
    ray.get(actors[1].errors.remote(12))
    rules = {"error_burst", "host_memory", "new_error"}
    wait_until(lambda: rules <= {b["rule"] for b in received}, timeout=30, what="webhook alerts")
    assert all(b["rank"] == 1 for b in received)

    def listed():
        result = _cli(job, "alerts", "--json")
        alerts = [a for j in json.loads(result.stdout)["data"] for a in j["alerts"]]
        return result, {a["rule"]: a for a in alerts if a["rank"] == 1}

    wait_until(lambda: rules <= set(listed()[1]), timeout=30, what="alert events")
    result, mine = listed()
    assert result.returncode == 1  # active alerts are a finding
    assert mine["error_burst"]["message"] == (
        "rank 1: 12 ERROR records in 60 s, the last: batch 11 failed: bad sample "
        "(workers_logs.py:49)"  # the logging call's line
    )
    assert mine["host_memory"]["message"].startswith("rank 1: host memory")
    table = _cli(job, "alerts", env={"COLUMNS": "200"})
    assert table.returncode == 1 and "rank 1: 12 ERROR records in 60 s" in table.stdout
    status = _cli(job, "status", env={"COLUMNS": "200"})  # active alerts show there too
    assert "alert [error]: rank 1: 12 ERROR records in 60 s" in status.stdout, status.stdout


def test_level_full_on_one_rank_for_a_few_seconds(ranks):
    actors, job = ranks
    switched = _cli(
        job, "level", "full", "--ranks", "1", "--sample-every", "5", "--for", "4s", "--json"
    )
    assert switched.returncode == 0, switched.stderr
    (row,) = json.loads(switched.stdout)["data"]
    assert (row["rank"], row["state"]["level"], row["state"]["back_to"]) == (1, "full", "light")
    assert (row["state"]["sample_every"], row["state"]["back_sample_every"]) == (5, 1)
    levels = ray.get([a.debug_capture.remote("first") for a in actors])
    ray.get([a.decorated_failure.remote(f"tag-{i}") for i, a in enumerate(actors)])
    assert levels == ["light", "full", "light", "light"]
    logs = _cli(job, "logs", "--grep", "captured args", "--raw", "--json")
    (result,) = json.loads(logs.stdout)["data"]
    assert [(ln["rank"], ln["message"]) for ln in result["lines"]] == [
        (1, "captured args of first")
    ]

    def failures():
        result = _cli(job, "events", "--kind", "trace.call_failed", "--limit", "500", "--json")
        events = [e for found in json.loads(result.stdout)["data"].values() for e in found]
        return {e["who"]: e["payload"].get("args") for e in events if "load_batch" in str(e)}

    wait_until(lambda: len(failures()) >= 4, timeout=30, what="the decorated calls' events")
    captured = failures()  # debug_decorator() without capture_args: only the level captures
    assert captured["rank 1"] == {"batch_tag": "'tag-1'"}, captured
    assert all(captured[f"rank {r}"] is None for r in (0, 2, 3)), captured
    wait_until(
        lambda: ray.get(actors[1].debug_capture.remote("later")) == "light",
        timeout=15,
        what="rank 1 back to light after --for",
    )
    shown = _cli(job, "level", "--json")
    levels_now = {
        r["rank"]: (r["state"]["level"], r["state"]["sample_every"])
        for r in json.loads(shown.stdout)["data"]
        if r["rank"] is not None  # the session's job also holds earlier tests' unranked workers
    }
    assert levels_now == {r: ("light", 1) for r in range(4)}  # --for restored both


def test_logs_follow_prints_a_line_logged_after_it_started(ranks):
    """A real `rankscope logs --follow` subprocess against live ranks: a line rank 0 logs once
    it runs is printed within seconds; Ctrl-C (SIGINT) ends it cleanly."""
    actors, job = ranks
    ray.get(actors[0].say.remote("follow-me first"))
    args = ["logs", "--follow", "--json", "--address", cluster_address(), "--job", job]
    follow = subprocess.Popen(
        [sys.executable, "-m", "rankscope.cli.main", *args, "--grep", "follow-me"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert follow.stdout is not None
    threading.Thread(target=lambda: [lines.put(ln) for ln in follow.stdout], daemon=True).start()
    try:
        first = json.loads(lines.get(timeout=90))  # the CLI's start-up, then the first read
        assert (first["rank"], first["message"]) == (0, "follow-me first")
        ray.get(actors[0].say.remote("follow-me second"))
        logged = time.monotonic()
        second = json.loads(lines.get(timeout=15))
        seen_after = time.monotonic() - logged
        assert (second["rank"], second["message"]) == (0, "follow-me second")
        assert seen_after < 10, seen_after
        follow.send_signal(signal.SIGINT)
        assert follow.wait(timeout=30) == 0, follow.stderr.read() if follow.stderr else ""
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()


def test_a_sigkilled_ranks_last_line_is_in_the_logs(ranks):
    actors, job = ranks
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actors[2].die.remote(), timeout=60)
    result = _cli(job, "logs", "--ranks", "2", "--raw", "--json")
    assert result.returncode == 0, result.stderr
    (logs,) = json.loads(result.stdout)["data"]
    assert logs["lines"][-1]["message"] == "about to die"


def test_bad_input_is_one_line_exit_2(ranks):
    _actors, job = ranks
    for args in (
        ("level", "loud"),
        ("level", "full", "--sample-every", "0"),
        ("logs", "--grep", "("),
        ("logs", "--since", "soon"),
    ):
        result = _cli(job, *args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and "error:" in result.stderr
