"""`rankscope hang` and the watchdog on real gloo ranks in Ray actors."""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import ray
from typer.testing import CliRunner

import rankscope.cli.main as cli
from helpers.cluster import (
    GLOO_JOB,
    cluster_address,
    probes_by_pid,
    run_cli,
    seen_in,
    wait_registered,
)
from helpers.workers import GlooRank, form_group, wait_for_data, wait_until
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeState


def _start(world: int, **options) -> tuple[list, list[int]]:
    actor = ray.remote(num_cpus=0)(GlooRank)
    actors = [actor.remote(r, world, **options) for r in range(world)]
    form_group(actors)
    pids = ray.get([a.pid.remote() for a in actors])
    wait_registered(pids, ranked=True)
    return actors, pids


@pytest.fixture
def four_ranks(cluster):
    actors, pids = _start(4)
    yield actors, pids
    for a in actors:
        ray.kill(a)


def _group(pids: list[int]) -> list[str]:
    """`--group` of these ranks: earlier tests' groups (with their ranks 0-3) stay in the job."""
    return ["--group", str(probes_by_pid(pids)[pids[0]].context.group)]


def _hang_json(*args: str) -> tuple[int, dict]:
    """Every selected group's report merged into one (one report per group of ranks)."""
    result = CliRunner().invoke(cli.app, ["hang", "--json", "--min-wait", "0.5", *args])
    assert result.exit_code in (0, 1), result.output
    reports = json.loads(result.output)["data"]
    assert len({r["job_id"] for r in reports}) == 1
    return result.exit_code, {"findings": [f for r in reports for f in r["findings"]]}


def test_healthy_job_exits_0(cluster):
    job = subprocess.Popen(
        [sys.executable, GLOO_JOB, cluster_address()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert job.stdout is not None
        job_id = job.stdout.readline().strip()
        wait_until(
            lambda: sum(p.context.rank is not None for p in HubClient.attach().probes(job_id)) == 4,
            what="the job's four ranks",
        )
        result = run_cli("hang", "--address", cluster_address(), "--job", job_id)
    finally:
        job.communicate(timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"job {job_id}: healthy: no rank is stuck" in result.stdout
    assert "group 0 (ranks 0-3): last #" in result.stdout


@pytest.fixture(scope="module")
def skipped(cluster, tmp_path_factory):
    """Four ranks step twice, then rank 3 skips the third all_reduce: it waits in its own code
    for a file, ranks 0-2 in all_reduce #3, while this file's tests look (at their group
    only). Yields the ranks' pids and when the skip began."""
    actors, pids = _start(4)
    ray.get([a.reduce_steps.remote(2) for a in actors])
    release = tmp_path_factory.mktemp("skip") / "release"
    started = time.time()
    for r, a in enumerate(actors):
        a.step_once.remote(str(release) if r == 3 else None)
    yield pids, started
    release.write_text("go")
    for a in actors:
        ray.kill(a)


def test_rank_that_skips_an_all_reduce_is_named_with_the_sequence_number_and_line(skipped):
    pids, _ = skipped
    wait_until(lambda: _hang_json(*_group(pids))[0] == 1, timeout=20, what="the hang to show")

    result = run_cli("hang", "--address", cluster_address(), "--min-wait", "0.5", *_group(pids))

    assert result.returncode == 1, result.stderr
    text = " ".join(result.stdout.split())
    # 2 reduce_steps all_reduces came first: the skipped one is #3 of the default group
    assert "group 0 (4 ranks): ranks 0-2 wait in all_reduce #3 (float32[4])" in text
    assert "rank 3 never entered #3, its last completed collective is #2" in text
    assert re.search(f"rank 3 is in {seen_in(wait_for_data, 'workers.py')}", text), text


def test_torch_flight_recorder_shows_a_hang_that_rankscopes_recorder_did_not_see(cluster, tmp_path):
    flight_recorder = {"env_vars": {"TORCH_FR_BUFFER_SIZE": "2000"}}
    actor = ray.remote(num_cpus=0)(GlooRank).options(runtime_env=flight_recorder)
    actors = [actor.remote(r, 2) for r in range(2)]
    ray.get([a.stop_recording.remote() for a in actors])
    form_group(actors)
    pids = ray.get([a.pid.remote() for a in actors])
    wait_registered(pids, ranked=True)
    ray.get([a.reduce_steps.remote(2) for a in actors])
    release = tmp_path / "release"
    actors[0].step_once.remote()
    actors[1].step_once.remote(str(release))
    try:
        wait_until(lambda: _hang_json(*_group(pids))[0] == 1, timeout=20, what="the hang")
        _, report = _hang_json(*_group(pids))
    finally:
        release.write_text("go")
        for a in actors:
            ray.kill(a)
    [hang] = [f["message"] for f in report["findings"] if f["kind"] == "hang"]
    assert "rank 0 wait in all_reduce #3 (float32[4])" in hang
    assert "(seen by the torch flight recorder)" in hang
    assert "rank 1 never entered #3, its last completed collective is #2" in hang


def test_shape_mismatch_at_one_sequence_number_names_both_shapes(four_ranks):
    actors, pids = four_ranks
    for r, a in enumerate(actors):
        a.all_reduce_of.remote(8 if r == 1 else 4)

    def mismatch():
        _, report = _hang_json(*_group(pids))
        found = [f for f in report["findings"] if f["kind"] == "mismatch"]
        return found[0] if found else None

    finding = wait_until(mismatch, timeout=20, what="the mismatch to show")
    assert finding["ranks"] == [1]
    assert "rank 1 passed float32[8] where ranks 0,2,3 passed float32[4]" in finding["message"]


def test_rank_killed_mid_training_is_reported_dead_with_the_cause(cluster):
    actors, pids = _start(2)
    ray.get(actors[1].say.remote("loading shard 7 of 8"))
    training = [a.reduce_steps.remote(100_000) for a in actors]
    wait_until(lambda: probes_by_pid(pids)[pids[1]].progress.step > 3, what="training")

    os.kill(pids[1], signal.SIGKILL)
    wait_until(
        lambda: probes_by_pid(pids)[pids[1]].state == ProbeState.DEAD, timeout=20, what="death"
    )
    code, report = _hang_json(*_group(pids))

    ray.kill(actors[0])
    del training
    assert code == 1
    # ranks 2 and 3 of earlier tests' jobs may show dead too: this test is about rank 1
    [dead] = [f for f in report["findings"] if f["kind"] == "dead" and f["ranks"] == [1]]
    assert "rank 1 is dead" in dead["message"] and "Ray: worker died" in dead["message"]
    assert "its last collective: all_reduce" in dead["message"]
    assert "last log lines: loading shard 7 of 8" in dead["message"]  # read on its node


def test_two_subgroups_report_per_group_and_name_the_group(four_ranks, tmp_path):
    actors, pids = four_ranks
    layout = {"tp": [[0, 1], [2, 3]], "dp": [[0, 2], [1, 3]]}
    ray.get([a.make_groups.remote(layout) for a in actors])
    release = tmp_path / "release"
    for r, a in enumerate(actors):
        a.group_all_reduce.remote("tp", str(release) if r == 1 else None)

    def hung_group():
        _, report = _hang_json(*_group(pids))
        found = [f for f in report["findings"] if f["kind"] == "hang"]
        return found[0] if found else None

    finding = wait_until(hung_group, timeout=20, what="the tp hang to show")
    release.write_text("go")
    assert finding["ranks"] == [1]
    assert finding["message"].startswith(f"group {finding['group']} (2 ranks): rank 0 wait")
    assert finding["group"] != "0"  # a subgroup, not the default group


def test_watchdog_writes_a_hang_report_before_the_backend_timeout(cluster, tmp_path):
    actors, _ = _start(2, hang_timeout=3.0)
    job_id = ray.get_runtime_context().get_job_id()
    run_dir = os.path.join(os.environ["RANKSCOPE_RUN_DIR"], job_id)
    before = set(glob.glob(os.path.join(run_dir, "hang-report-*.json")))
    release = tmp_path / "release"
    for r, a in enumerate(actors):
        a.step_once.remote(str(release) if r == 1 else None)

    reports = wait_until(
        lambda: set(glob.glob(os.path.join(run_dir, "hang-report-*.json"))) - before,
        timeout=30,
        what="the watchdog's report",
    )

    release.write_text("go")
    for a in actors:
        ray.kill(a)
    [path] = reports
    with open(path) as f:
        written = json.load(f)
    assert "all_reduce" in written["reason"] and "has run for" in written["reason"]
    messages = [f["message"] for f in written["report"]["findings"]]
    assert any("rank 1 never entered" in m for m in messages), messages


def test_a_hang_raises_an_alert_by_itself_naming_the_rank_and_its_line(skipped):
    """No command run: the group's judge raises `hang` about rank 3, stuck in its own code
    while ranks 0-2 wait in all_reduce, within a few seconds of the 10 s threshold."""
    pids, started = skipped
    client = HubClient.attach(cluster_address())
    job = str(probes_by_pid(pids)[pids[0]].context.job_id)

    def hang_alert() -> dict | None:
        for e in client.events(job, ["alert"], 200):
            p = e["payload"]
            if p.get("rule") == "hang" and p.get("rank") == 3 and e["time"] >= started:
                return e
        return None

    wait_until(lambda: hang_alert() is not None, timeout=40, what="the hang alert")
    alert = hang_alert()
    assert alert is not None
    assert "rank 3 never entered" in alert["payload"]["message"]
    assert re.search(seen_in(wait_for_data, "workers.py"), alert["payload"]["message"])
    assert alert["time"] - started < 10 + 2 + 8  # the threshold, a judge turn, heartbeats
