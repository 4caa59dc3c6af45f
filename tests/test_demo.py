"""`rankscope demo`: the main job, run as a user runs it (its own embedded Ray cluster), and
the report of each job it writes, live and from its run directory after the job ended."""

from __future__ import annotations

import re

import pytest

from helpers import run_cli, run_demo


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
