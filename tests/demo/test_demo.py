"""`rankscope demo`: the main job, run as a user runs it (its own embedded Ray cluster), and
the report of each job it writes, live and from its run directory after the job ended."""

from __future__ import annotations

import os
import re

import pytest

from helpers.cluster import run_cli, run_demo


def test_the_default_fault_is_found_and_the_live_report_names_the_rank():
    """`make demo`: one fault (the stall) on a new embedded cluster."""
    result = run_demo()
    out = " ".join(result.stdout.split())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fault=stall" in out
    assert "rank 3 is elsewhere: load_batch train.py" in out
    assert "demo done (found it)" in out
    live = re.search(r"verdict: (.*?) demo done", out)
    assert live is not None and "rank 3 " in live.group(1), out
    # a stall leaves nothing behind once its ranks are gone: only the live page has it
    assert re.search(r"report: (\S+)/report\.html", out), out


def test_unknown_fault_is_one_clear_line():
    result = run_demo("--fault", "meteor")
    assert result.returncode == 2
    assert result.stderr.strip().startswith("rankscope: error: --fault 'meteor': choose one of")


FAULTS = ("hang", "leak", "desync", "nan", "error-burst", "pending-actor", "breakpoint")
COMMANDS = {"nan": "rankscope monitor", "error-burst": "rankscope alerts"} | {
    "pending-actor": "rankscope why-pending"
}
AFTER = {
    "hang": "rank 3 never entered #",
    "leak": "rank 3: rss leaks",
    "desync": "rank 3 is the outlier",
}
"""What each fault's report says when read again from its run directory, after the job."""


@pytest.mark.timeout(600)  # seven jobs, one after another, on a cluster of their own
def test_several_faults_run_as_jobs_of_one_cluster_and_each_report_names_the_rank():
    """`--fault all`'s code path with seven of the faults (`rankscope hang`'s, `monitor`'s,
    `alerts`', `why-pending`'s, `debug`'s...), one cluster; the others in `demo --fault all`
    (docs/PERFORMANCE.md). What each fault's own commands print goes to stderr as it runs."""
    # a terminal wide enough for the table's "by" column; the verdicts still wrap
    result = run_demo("--fault", ",".join(FAULTS), env={"COLUMNS": "120"}, timeout=540)
    assert result.returncode == 0, result.stdout + result.stderr
    cells = [line.split("│") for line in result.stdout.splitlines() if line.count("│") >= 5]
    rows = [(c[1].strip(), c[2].strip()) for c in cells if c[1].strip() not in ("", "fault")]
    assert rows == [(fault, "yes") for fault in FAULTS]  # wrapped verdicts: lines without a name
    by = {c[1].strip(): c[4].strip() for c in cells if c[1].strip()}
    assert {fault: by[fault] for fault in COMMANDS} == COMMANDS
    err = " ".join(result.stderr.split())  # each fault's diagnosis, as its command prints it
    hang_verdict = err.split("verdict: ", 1)[1][:200]  # the first job's live page: the hang's
    assert "rank 3 never entered #" in hang_verdict, err
    assert "rank 3 saw the first nan loss at step 6" in err  # loop step 5: the 6th step()
    assert "rank 3: 12 ERROR" in err  # the alert, in a table cell that wraps
    # the demo's cluster has no dashboard: why-pending read the GCS, and said so
    assert "infeasible actor Evaluator (" in err
    assert "asks {CPU: 8}: no node could ever fit it" in err  # 4 ranks: a 4-CPU node
    assert "short by 4" in err and "pending and running tasks left out" in err
    # the job's report, written while the actor waited, says so first
    assert "verdict: actor Evaluator can never be placed on this cluster: " in err
    # `memory`: the leaking rank, and its memory report written
    assert "leak: rank 3 (injected: rank 3)" in err
    memory_report = re.search(r"memory report: (\S+\.html)", err)
    assert memory_report is not None and os.path.exists(memory_report.group(1)), err
    # `consistency` after training: the drifting rank and tensor
    assert re.search(
        r"replicas_after_training: 1 of 4 tensors differ; rank 3 is the outlier; "
        r"worst 0\.weight max\|d\|=",
        err,
    ), err
    assert re.search(r"0\.weight mismatch 0 3 ", err), err
    # `debug list`: the paused rank, and how to attach to it; then the job trains to the end
    paused = re.search(r"(\w{8}) \(rank 3, breakpoint at fault_breakpoint\.py:\d+ in inject", err)
    assert paused is not None, err
    assert f"rankscope debug attach {paused.group(1)}" in err
    assert "all 4 ranks trained 30 steps" in err

    reports = dict(re.findall(r"^report of ([\w-]+): (\S+)/report\.html$", result.stdout, re.M))
    assert sorted(reports) == sorted(FAULTS)
    assert len(set(reports.values())) == len(FAULTS)  # one job (and job directory) each
    for fault, verdict in AFTER.items():
        after = run_cli("report", reports[fault], "-o", reports[fault] + "/after.html")
        assert after.returncode == 1, after.stdout + after.stderr  # the finding, from the files
        assert verdict in " ".join(after.stdout.split())


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
