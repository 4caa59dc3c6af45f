"""`rankscope demo`: the main job, run as a user runs it (its own embedded Ray cluster), and
the report of each job it writes, live and from its run directory after the job ended."""

from __future__ import annotations

import re

import pytest

from helpers.cluster import run_cli, run_demo


@pytest.mark.parametrize(
    ("fault", "expected", "verdict"),
    [
        ("stall", "rank 3 is elsewhere: load_batch train.py", "rank 3 "),
        ("hang", "rank 3 never entered #", "rank 3 never entered #"),
    ],
)
def test_demo_finds_the_injected_fault_and_its_report_names_the_rank(fault, expected, verdict):
    result = run_demo("--fault", fault)
    out = " ".join(result.stdout.split())
    assert result.returncode == 0, result.stdout + result.stderr
    assert expected in out
    assert "demo done (found it)" in out
    live = re.search(r"verdict: (.*?) demo done", out)
    assert live is not None and verdict in live.group(1), out

    job_dir = re.search(r"report: (\S+)/report\.html", out)
    assert job_dir is not None, out
    if fault == "stall":
        return  # a stall leaves nothing behind once its ranks are gone: only the live page has it
    after = run_cli("report", job_dir.group(1), "-o", job_dir.group(1) + "/after.html")
    assert after.returncode == 1, after.stdout + after.stderr  # the finding, from the files
    assert verdict in " ".join(after.stdout.split())


def test_several_faults_run_as_jobs_of_one_cluster_and_each_report_names_the_rank():
    """`--fault all`'s code path, with two faults to keep the suite fast."""
    result = run_demo("--fault", "leak,desync")
    assert result.returncode == 0, result.stdout + result.stderr
    cells = [line.split("│") for line in result.stdout.splitlines() if line.count("│") >= 5]
    rows = [(c[1].strip(), c[2].strip()) for c in cells if c[1].strip() not in ("", "fault")]
    assert rows == [("leak", "yes"), ("desync", "yes")]  # wrapped verdicts: lines without a name
    reports = dict(re.findall(r"^report of (\w+): (\S+)/report\.html$", result.stdout, re.M))
    assert sorted(reports) == ["desync", "leak"]
    assert reports["leak"] != reports["desync"]  # one job (and job directory) each
    for fault, verdict in (("leak", "rank 3: rss leaks"), ("desync", "rank 3 is the outlier")):
        after = run_cli("report", reports[fault], "-o", reports[fault] + "/after.html")
        assert after.returncode == 1, after.stdout + after.stderr
        assert verdict in " ".join(after.stdout.split())


def test_unknown_fault_is_one_clear_line():
    result = run_demo("--fault", "meteor")
    assert result.returncode == 2
    assert result.stderr.strip().startswith("rankscope: error: --fault 'meteor': choose one of")


def test_new_faults_run_as_jobs_of_one_cluster_and_the_table_names_the_rank():
    """Three of the new faults (`rankscope monitor`'s, `rankscope alerts`', `rankscope
    why-pending`'s) through `--fault all`'s code path, one cluster; the others in `demo --fault
    all` (docs/PERFORMANCE.md)."""
    result = run_demo("--fault", "nan,error-burst,pending-actor")
    assert result.returncode == 0, result.stdout + result.stderr
    cells = [line.split("│") for line in result.stdout.splitlines() if line.count("│") >= 5]
    rows = [(c[1].strip(), c[2].strip()) for c in cells if c[1].strip() not in ("", "fault")]
    assert rows == [("nan", "yes"), ("error-burst", "yes"), ("pending-actor", "yes")]
    by = {c[1].strip(): c[4].strip() for c in cells if c[1].strip()}
    assert by["nan"] == "rankscope monitor"
    assert by["error-burst"] == "rankscope alerts"
    assert by["pending-actor"] == "rankscope why-pending"
    err = " ".join(result.stderr.split())  # each fault's diagnosis, as its command prints it
    assert "rank 3 saw the first nan loss at step 6" in err  # loop step 5: the 6th step()
    assert "rank 3: 12 ERROR" in err  # the alert, in a table cell that wraps
    # the demo's cluster has no dashboard: why-pending read the GCS, and said so
    assert "infeasible actor Evaluator (" in err
    assert "asks {CPU: 8}: no node could ever fit it" in err  # 4 ranks: a 4-CPU node
    assert "short by 4" in err and "pending and running tasks left out" in err
    # the job's report, written while the actor waited, says so first
    assert "verdict: actor Evaluator can never be placed on this cluster: " in err


def test_a_fault_s_first_step_and_the_steps_it_needs():
    from rankscope.demo.run import DemoPlan
    from rankscope.errors import UserError

    assert DemoPlan("nan", 4, 30).fault_step == 5
    assert DemoPlan("straggler", 4, 4).fault_step == 3
    assert DemoPlan("loss-spike", 4, 30).fault_step == 12  # after the detector's 10-step window
    with pytest.raises(UserError, match="loss-spike needs at least 13"):
        DemoPlan("loss-spike", 4, 12)


def test_named_lists_the_ranks_and_steps_of_one_kind_of_finding():
    from rankscope.demo.monitor_check import named
    from rankscope.monitor.model import Finding, FindingKind

    findings = [
        Finding(FindingKind.LOSS_SPIKE, (3,), 12, "", ""),
        Finding(FindingKind.STRAGGLER, (1,), None, "", ""),
        Finding(FindingKind.LOSS_SPIKE, (0,), 13, "", ""),
    ]
    assert named(findings, FindingKind.LOSS_SPIKE) == [(0, 13), (3, 12)]
    assert named(findings, FindingKind.NON_FINITE) == []


def test_an_incident_of_the_catalog_runs_on_verl_and_its_report_names_the_exception():
    """`demo --client`: the catalog's incident as a worked example, on verl's RayWorkerGroup."""
    result = run_demo("--client", "verl", "--fault", "exception")
    out = " ".join(result.stdout.split())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "expected answer: exception rank 2 train.py:" in out
    assert re.search(r"named in [\d.]+ s: exception rank 2 \[2\] train\.py:\d+ \(fail\)", out), out
    assert "rank 2 raised ValueError: bad batch" in out  # the report's own summary, printed


def test_an_unknown_incident_is_one_clear_line_naming_the_clients_faults():
    listed = run_demo("--client", "raytrain", "--fault", "list")
    assert listed.returncode == 0
    assert {"exception", "sigkill", "healthy-startup-raytrain"} <= set(listed.stdout.split())
    result = run_demo("--client", "raytrain", "--fault", "meteor")
    assert result.returncode == 2
    assert result.stderr.strip().startswith(
        "rankscope: error: --fault 'meteor' with --client raytrain: choose one of exception,"
    )
    assert len(result.stderr.strip().splitlines()) == 1
