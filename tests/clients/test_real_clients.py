"""The real clients, unchanged, with rankscope installed by the setup hook only.

verl 0.9.1's single controller (RayResourcePool + RayWorkerGroup of a Worker subclass) and Ray
Train's TorchTrainer, 4 CPU ranks on gloo each (real_job.py, real_clients.py beside this file).
One job plays three incidents in turn, as a long run meets them: rank 2 straggles (the trace,
the monitor, the judge's alert and the logs must name it, with no rankscope call in the user's
code); then rank 2 stalls before the 3rd all_reduce of its next call (`hang` and `stacks` must
name it and its line: Ray Train runs the loop in its own thread, not the main thread); then
rank 2 exits: the others' all_reduce fails, the client tears the group down, and rankscope must
say that they failed (not "never entered") and that rank 2 died first. When rank 2 raises
instead, its exception reaches the hub before the client tears the group down.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from subprocess import PIPE

import pytest
from real_clients import train_steps, wait_for_release

from helpers.cluster import cluster_address, run_cli, seen_in
from helpers.workers import wait_until
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeState

JOB = os.path.join(os.path.dirname(__file__), "real_job.py")
STALLED = 2


def _start_job(client: str, mode: str, release: str) -> tuple[str, subprocess.Popen]:
    driver = subprocess.Popen(
        [sys.executable, JOB, cluster_address(), client, str(STALLED), release, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert driver.stdout is not None
    return driver.stdout.readline().strip(), driver


def _finish(release: str, driver: subprocess.Popen) -> None:
    if not os.path.exists(release):
        with open(release, "w") as f:
            f.write("go")
    try:
        driver.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        driver.kill()


@pytest.fixture(params=["verl", "train"])
def straggling_job(
    request, cluster, hub, tmp_path
) -> Iterator[tuple[str, str, str, subprocess.Popen]]:
    """A job of the client whose rank 2 computes 50 ms more a step from `<release>.straggle`
    until `<release>.stop`, then waits for `release` before its 3rd all_reduce; yields (client,
    job id, release, driver). Ray Train's job starts healthy: the test watches its start-up."""
    release = str(tmp_path / "release")
    if request.param == "verl":
        with open(f"{release}.straggle", "w") as f:
            f.write("now")
    job_id, driver = _start_job(request.param, "straggle", release)
    try:
        yield request.param, job_id, release, driver
    finally:
        with open(f"{release}.stop", "w") as f:
            f.write("stop")
        _finish(release, driver)


def _json(*args: str) -> tuple[int, object]:
    result = run_cli(*args, "--json", "--address", cluster_address())
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return result.returncode, json.loads(result.stdout)["data"]


def _diagnosis(job_id: str) -> dict:
    """`rankscope report --json`'s diagnosis: the verdict as data."""
    _, report = _json("report", "--job", job_id)
    assert isinstance(report, dict) and report["diagnosis"] is not None, report
    return report["diagnosis"]


def _findings(job_id: str, kind: str) -> list[dict]:
    _, reports = _json("hang", "--job", job_id, "--min-wait", "0.5")
    return [f for r in reports for f in r["findings"] if f["kind"] == kind]  # type: ignore[union-attr]


def _registered(job_id: str) -> None:
    wait_until(
        lambda: sum(p.context.rank is not None for p in HubClient.attach().probes(job_id)) == 4,
        timeout=120,
        what="the client's four ranks to register",
    )


@pytest.mark.timeout(600)  # Ray Train's start-up watched, then three live `report`s
def test_a_straggler_then_a_stall_then_a_death_are_named_on_the_real_client(
    straggling_job, tmp_path
):
    client, job_id, release, driver = straggling_job
    if client == "train":
        _the_start_up_is_quiet(job_id, f"{release}.stop")
        with open(f"{release}.straggle", "w") as f:
            f.write("now")
    _registered(job_id)
    _the_straggler_is_named(job_id, tmp_path)
    with open(f"{release}.stop", "w") as f:
        f.write("stop")
    third = _the_stall_is_named(job_id, release)
    with open(release, "w") as f:
        f.write("die")
    _the_death_is_named(job_id, third)
    driver.communicate(timeout=120)


def _the_start_up_is_quiet(job_id: str, stop: str) -> None:
    """Start-up is not a failure: polled with `why-pending --json` and `report --json` from the
    moment the driver starts until every worker has stepped, while Ray Train's placement group
    is created and committed, no poll may say "infeasible" nor hold any finding."""
    looks, after, registered = [], 0, False
    deadline = time.time() + 270  # Ray Train's start-up takes 60-200 s on a loaded 2-core machine
    while not after and time.time() < deadline:
        stepped = all(os.path.exists(f"{stop}.stepped{r}") for r in range(4))
        begun = time.monotonic()
        verdicts, code, findings, verdict = _start_up_look(job_id)
        looks.append((round(time.time(), 1), [v["verdict"] for v in verdicts], verdict))
        bad = [v["reason"] for v in verdicts if v["verdict"] == "infeasible"]
        assert not bad, (bad, looks)
        registered = registered or code != 2
        assert code == (0 if registered else 2) and not findings, (findings, verdict, looks)
        after += stepped
        # a user's pace, and the looks (two commands, a second of CPU each) at most half the
        # time: the job starts on the same two cores
        time.sleep(max(1.0, time.monotonic() - begun))
    assert after, ("the workers never stepped", looks)
    assert looks[0][2] == "(not registered yet)", looks  # polled from the very start


def _start_up_look(job_id: str) -> tuple[list[dict], int, list[str], str]:
    """One look as a user takes it (both commands at once): why-pending's verdicts on this
    job's work, report's exit code, its findings and its verdict. Before the job's first worker
    starts (and its probe registers) the hub does not know the job: `report --job` says so,
    exit 2."""
    address = ["--json", "--address", cluster_address()]
    cli = [sys.executable, "-m", "rankscope.cli.main"]
    pending, report = (
        subprocess.Popen([*cli, *args, *address], stdout=PIPE, stderr=PIPE, text=True)
        for args in (["why-pending"], ["report", "--job", job_id])
    )
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


def _the_straggler_is_named(job_id: str, tmp_path: Path) -> None:
    """No rankscope call in the user's code: the trace scores the ranks from the collectives
    the recorder saw, and the logs come from the workers' own stdout, tagged with the rank."""
    out = tmp_path / "trace.json"
    traced = run_cli(
        "trace", "--job", job_id, "--duration", "4s", "-o", str(out), "--json",
        "--address", cluster_address(),
    )  # fmt: skip
    assert traced.returncode == 1, traced.stdout + traced.stderr  # a straggler is a finding
    data = json.loads(traced.stdout)["data"]
    named = [s for s in data["stragglers"] if s["is_straggler"]]
    assert [s["rank"] for s in named] == [STALLED], data["stragglers"]
    rows = {r["rank"]: r for r in data["ranks"]}
    assert all(rows[r]["wait_share"] > rows[STALLED]["wait_share"] + 0.2 for r in (0, 1, 3))

    code, jobs = _json("monitor", "--job", job_id)
    assert code == 1  # the straggler is a finding
    found = [f for j in jobs for f in j["findings"] if f["kind"] == "straggler"]  # type: ignore[union-attr]
    assert [f["ranks"] for f in found] == [[STALLED]], found

    def straggler_alert() -> list[dict]:  # raised by the group's judge, no CLI asking
        _, results = _json("alerts", "--job", job_id)
        return [
            a
            for r in results  # type: ignore[union-attr]
            for a in r["alerts"]
            if a["rule"] == "straggler" and a["rank"] == STALLED
        ]

    wait_until(straggler_alert, timeout=60, what="the judge's straggler alert")

    logs = run_cli(
        "logs", "--job", job_id, "--grep", "loss=", "--address", cluster_address(),
        env={"COLUMNS": "200"},
    )  # fmt: skip
    assert logs.returncode == 0, logs.stderr
    assert re.search(r"ranks 0-3: step \S+ loss=0\.500\.\.0\.530", logs.stdout), logs.stdout


def _the_stall_is_named(job_id: str, release: str) -> int:
    """Rank 2 waits before the 3rd all_reduce after the straggle: returns that all_reduce's
    number in the group."""
    [hang] = wait_until(lambda: _findings(job_id, "hang"), timeout=120, what="the stall")
    with open(f"{release}.straggled") as f:  # written before the call's first all_reduce
        third = int(f.read()) + 3
    where = seen_in(wait_for_release, "real_clients.py")
    assert hang["ranks"] == [STALLED]
    assert f"ranks 0,1,3 wait in all_reduce #{third} (float32[8])" in hang["message"]
    assert re.search(
        f"rank 2 never entered #{third}, its last completed collective is #{third - 1}; "
        f"rank 2 is in {where}",
        hang["message"],
    ), hang["message"]
    stacks = run_cli("stacks", "--job", job_id, "--address", cluster_address())
    assert re.search(f"rank 2: {where}", stacks.stdout), stacks.stdout
    blind = _diagnosis(job_id)  # the one command a user who does not know what is wrong runs
    assert (blind["kind"], blind["ranks"]) == ("hang", [STALLED]), blind
    assert re.fullmatch(where.rsplit(" ", 1)[-1], blind["where"]), blind  # its file:line
    return third


def _the_death_is_named(job_id: str, third: int) -> None:
    """Rank 2 exits: the others' all_reduce #`third` fails and the client tears the group down."""

    def all_dead() -> bool:
        ranked = [p for p in HubClient.attach().probes(job_id) if p.context.rank is not None]
        return all(p.state == ProbeState.DEAD for p in ranked)

    wait_until(all_dead, timeout=120, what="the client to tear the group down")
    [failed] = _findings(job_id, "failed")
    # the ranks whose all_reduce raised before the client killed them (one may die inside it)
    assert re.match(
        rf"group 0 \(4 ranks\): ranks? [013,]+ failed in all_reduce #{third} \(float32\[8\]\): "
        r"Connection closed by peer",
        failed["message"],
    ), failed["message"]
    assert f"rank 2 never entered #{third}" in failed["message"] and failed["ranks"] == [STALLED]
    assert not _findings(job_id, "hang")
    [first] = _findings(job_id, "first_death")
    assert first["ranks"] == [STALLED] and first["message"].startswith("rank 2 died first")
    code, status = _json("status", "--job", job_id)
    assert code == 1
    assert status[job_id]["first_death"].startswith("rank 2 died first")  # type: ignore[index]
    blind = _diagnosis(job_id)
    assert (blind["kind"], blind["ranks"], blind["culprit"]) == ("death", [STALLED], "rank 2")
    assert blind["sentence"].startswith("rank 2 died first: "), blind


def _raise_line() -> int:
    import inspect

    lines, first = inspect.getsourcelines(train_steps)
    return first + next(
        i for i, line in enumerate(lines) if 'raise ValueError("bad batch")' in line
    )


@pytest.mark.parametrize("client", ["verl", "train"])
def test_an_exception_on_one_rank_reaches_the_hub_before_the_teardown(
    client, cluster, hub, tmp_path
):
    """Rank 2's user code raises while ranks 0, 1, 3 wait for it in all_reduce; the client
    (verl's driver, Ray Train's controller) then kills the group within seconds."""
    release = str(tmp_path / "release")
    with open(release, "w") as f:
        f.write("raise")
    job_id, driver = _start_job(client, "stall", release)
    out, _ = driver.communicate(timeout=120)
    assert out.strip().startswith("failed:"), out

    def recorded() -> list[dict]:
        events = HubClient.attach().events(job_id, ["task_error"], limit=50)
        return [e["payload"] for e in events if e["payload"].get("rank") == STALLED]

    [error] = wait_until(recorded, timeout=10, what="rank 2's task_error")
    assert (error["exc_type"], error["message"]) == ("ValueError", "bad batch")
    assert error["where"] == f"real_clients.py:{_raise_line()}"
    assert error["function"] == "train_steps" and not error["echo"]
    assert error["via"] == ("ray_task" if client == "verl" else "ray_train")
    assert error["task"] == ("TrainWorker.train" if client == "verl" else "ray_train_loop")
    blind = _diagnosis(job_id)  # after the teardown: the exception, not the deaths it caused
    assert (blind["kind"], blind["ranks"], blind["where"]) == (
        "exception",
        [STALLED],
        f"real_clients.py:{_raise_line()}",
    ), blind
    assert blind["sentence"].startswith(
        f"rank 2 raised ValueError: bad batch (real_clients.py:{_raise_line()})"
    ), blind
