"""Start-up is not a failure, on the real client: a healthy Ray Train TorchTrainer (4 CPU workers
on gloo, 2 s steps, rankscope by the setup hook only), polled with `why-pending --json` and
`report --json` from the moment its driver starts until every worker has stepped. While its
placement group is created and committed, no poll may say "infeasible" nor hold any finding."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from helpers.cluster import cluster_address

JOB = os.path.join(os.path.dirname(__file__), "real_job.py")
WORLD = 4


def _cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rankscope.cli.main",
            *args,
            "--json",
            "--address",
            cluster_address(),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _poll(job_id: str) -> tuple[list[dict], int, list[str], str]:
    """One look as a user takes it (both commands at once): why-pending's verdicts on this
    job's work, report's exit code, its findings and its verdict. Before the job's first worker
    starts (and its probe registers) the hub does not know the job: `report --job` says so,
    exit 2."""
    pending, report = _cli("why-pending"), _cli("report", "--job", job_id)
    out, err = pending.communicate(timeout=120)
    assert pending.returncode in (0, 1), out + err
    every = json.loads(out)["data"]["verdicts"]
    verdicts = [v for v in every if v["demand"]["job_id"] == job_id]  # other tests' work: not ours
    out, err = report.communicate(timeout=120)
    if report.returncode == 2 and "no such job registered" in err:
        return verdicts, 2, [], "(not registered yet)"
    assert report.returncode in (0, 1), out + err
    data = json.loads(out)["data"]
    findings = [f"{s['key']}: {f}" for s in data["sections"] for f in s["findings"]]
    return verdicts, report.returncode, findings, data["verdict"]


@pytest.mark.timeout(360)  # Ray Train's start-up takes 60-200 s on a loaded 2-core machine
def test_a_ray_train_job_starting_up_gets_no_infeasible_verdict_and_no_finding(
    cluster, hub, tmp_path
):
    stop = str(tmp_path / "stop")
    driver = subprocess.Popen(
        [sys.executable, JOB, cluster_address(), "train", "-1", stop, "steady"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert driver.stdout is not None
    try:
        job_id = driver.stdout.readline().strip()
        looks, after, registered = [], 0, False
        deadline = time.time() + 270
        while not after and time.time() < deadline:
            stepped = all(os.path.exists(f"{stop}.stepped{r}") for r in range(WORLD))
            verdicts, code, findings, verdict = _poll(job_id)
            looks.append((round(time.time(), 1), [v["verdict"] for v in verdicts], verdict))
            bad = [v["reason"] for v in verdicts if v["verdict"] == "infeasible"]
            assert not bad, (bad, looks)
            registered = registered or code != 2
            assert code == (0 if registered else 2) and not findings, (findings, verdict, looks)
            after += stepped
            time.sleep(1.0)  # a user's pace; the job starts on the same two cores
        assert after, ("the workers never stepped", looks)
        assert looks[0][2] == "(not registered yet)", looks  # polled from the very start
    finally:
        with open(stop, "w") as f:
            f.write("stop")
        try:
            driver.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            driver.kill()
