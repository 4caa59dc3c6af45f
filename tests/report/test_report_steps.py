"""The whole run's step series: kept small on the worker (pure), written to the run directory
while the job runs, and charted by `rankscope report` after the job ended (real cluster)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers.cluster import cluster_address, run_cli
from rankscope.monitor.io_history import MAX_POINTS, StepHistory, file_name
from rankscope.report.collect_steps import series_from_docs

JOB = os.path.join(os.path.dirname(__file__), "steps_job.py")


def test_a_long_run_keeps_its_shape_in_a_bounded_history():
    history = StepHistory()
    rows = [(s, 100.0 + s * 0.5, 10.0 / s, 64, 1.0) for s in range(1, 10_001)]
    for i in range(0, len(rows), 700):  # heartbeats read the recorder's deque whole
        history.add(rows[max(0, i - 300) : i + 700])  # overlapping reads: no step twice
    kept = history.rows()
    assert len(kept) <= MAX_POINTS + 1
    assert history.steps_seen == 10_000 and history.stride == 128
    assert kept[0][0] == 128 and kept[-1][0] == 10_000  # the newest step is always in
    assert sum(r[3] for r in kept) == 64 * 10_000  # every step's tokens, in some interval
    assert kept[-1][2] == 10.0 / 10_000 and kept[-1][1] == 100.0 + 5000.0
    assert len(json.dumps(kept)) < 8 * 1024


def test_the_files_make_the_reports_series_and_the_monitors_findings():
    loss = [2.0] * 60 + [2.0 + 0.1 * i for i in range(60)]  # rank 1 diverges
    docs = [
        {"kind": "rankscope.steps", "rank": r, "group": "g", "stride": 2,
         "columns": ["step", "t", "loss", "tokens", "grad_norm"],
         "rows": [[2 * i + 2, 10.0 + i, loss[i] if r else 2.0, 200, 1.0] for i in range(120)]}
        for r in (0, 1)
    ]  # fmt: skip
    series, health, stride = series_from_docs(docs)
    assert stride == 2 and [s["rank"] for s in series] == [0, 1]
    assert series[1]["samples"][-1] == [240, 129.0, loss[-1], 200.0, 1.0]
    kinds = {(f["kind"], tuple(f["ranks"])) for h in health for f in h["findings"]}
    assert ("loss_divergence", (1,)) in kinds
    assert file_name(3, "10.0.0.1:29500", 77) == "steps-rank3-10.0.0.1_29500.json"
    assert file_name(None, "", 77) == "steps-pid77.json"
    assert file_name(None, "", 77, "10.0.0.2") == "steps-10.0.0.2-pid77.json"  # pids repeat


def test_after_the_job_ended_the_report_charts_each_ranks_loss(cluster, tmp_path):
    ran = subprocess.run(
        [sys.executable, JOB, cluster_address(), "300"], capture_output=True, text=True,
        timeout=180,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    job = ran.stdout.split()[-1]
    job_dir = os.path.join(os.environ["RANKSCOPE_RUN_DIR"], job)
    names = sorted(n for n in os.listdir(job_dir) if n.startswith("steps-"))
    assert names == ["steps-rank0-steps.json", "steps-rank1-steps.json"]
    for name in names:
        assert os.stat(os.path.join(job_dir, name)).st_mode & 0o777 == 0o600

    result = run_cli("report", job_dir, "--json")
    assert result.returncode == 1, result.stderr[-2000:]  # rank 1's loss diverges: a finding
    data = json.loads(result.stdout)["data"]
    trends = next(s for s in data["sections"] if s["key"] == "trends")
    charts = {c["title"]: c for c in trends["charts"]}
    loss = charts["loss per rank over steps"]
    assert [s["label"] for s in loss["series"]] == ["rank 0", "rank 1"]
    for s in loss["series"]:
        assert s["points"][-1][0] == 300  # the last step, recorded before the job ended
        assert len(s["points"]) >= 64  # 128 points at most, halved when full
    assert loss["series"][1]["highlight"] and not loss["series"][0]["highlight"]
    assert "tokens/s per rank over steps (running median of 5 steps)" in charts
    assert "grad norm per rank over steps" in charts
    assert "run directory's step files" in trends["summary"]
    assert "rank 1 stands out (loss divergence)" in " ".join(trends["notes"])

    page = tmp_path / "page.html"
    html_run = run_cli("report", job_dir, "-o", str(page))
    assert html_run.returncode == 1, html_run.stderr[-2000:]
    html = page.read_text()
    assert 'aria-label="loss per rank over steps"' in html

    # from another machine (no run directory here): the trace's digest and the step series are
    # read in a task on the hub's node, and only they come back
    from rankscope.report.collect import collect_run
    from rankscope.runtime.client import HubClient

    track = {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1,
             "args": {"name": "rank 0 (SteppingRank) 10.0.0.9"}}  # fmt: skip
    span = {"ph": "X", "name": "load_batch", "pid": 1, "tid": 1, "ts": 0, "dur": 30000}
    marks = [{"ph": "i", "name": f"step {i}", "pid": 1, "tid": 1, "ts": i * 40000} for i in (0, 1)]
    trace = {"traceEvents": [track, span, *marks], "otherData": {"base_epoch_ns": 0}}
    HubClient.attach().write_artifact(job, "trace-remote.json", json.dumps(trace))
    remote = collect_run(None, None, job, live=False, files_here=False)
    [read] = remote.traces
    assert read["name"] == "trace-remote.json" and "error" not in read, read
    assert read["digest"]["ranks"][0]["label"] == "rank 0 (SteppingRank) 10.0.0.9"
    assert [s["rank"] for s in remote.series] == [0, 1]
    assert remote.series[1]["samples"][-1][0] == 300
    assert "run directory's step files" in remote.series_from


def test_past_64_ranks_the_odd_ranks_whole_series_are_analysed():
    """4,096 ranks' detectors over every point would take 30 s: only the odd ranks' are read
    whole, and the rank whose loss diverges is still the one named."""
    loss = [2.0 - 0.005 * i for i in range(60)] + [1.7 + 0.03 * i for i in range(60)]
    docs = [
        {"kind": "rankscope.steps", "rank": r, "group": "g", "stride": 4,
         "columns": ["step", "t", "loss", "tokens", "grad_norm"],
         "rows": [[4 * i + 4, 10.0 + i, loss[i] if r == 77 else 2.0 - 0.005 * min(i, 59) + 1e-4 * r,
                   400, 1.0] for i in range(120)]}
        for r in range(100)
    ]  # fmt: skip
    series, health, _ = series_from_docs(docs)
    assert len(series) == 100 and len(series[77]["samples"]) == 120  # charts get every point
    named = {(f["kind"], tuple(f["ranks"])) for h in health for f in h["findings"]}
    assert ("loss_divergence", (77,)) in named


def test_the_files_table_folds_the_step_files_into_one_line():
    from rankscope.report.model import RunData
    from rankscope.report.sections import files_section

    files = (("events.jsonl", 900), *((f"steps-rank{r}.json", 8000) for r in range(4096)))
    section = files_section(RunData("j", "d", files=(*files, ("trace-1.json", 5))), 0.0)
    assert section is not None and section.summary == "4098 files"
    rows = section.tables[0].rows
    assert [r[0] for r in rows] == [
        "events.jsonl", "trace-1.json", "steps-*.json (4,096 files, one per rank)"
    ]  # fmt: skip


def test_a_damaged_step_file_costs_its_rank_only():
    good = {"kind": "rankscope.steps", "rank": 0, "group": "g", "stride": 1,
            "columns": ["step", "t", "loss", "tokens", "grad_norm"],
            "rows": [[1, 1.0, 2.0, 10, 1.0], [2, 2.0, 1.9, 10, 1.0]]}  # fmt: skip
    cut = {**good, "rank": 1, "rows": [[1, 1.0, 2.0], [2, "x"]]}
    odd = {**good, "rank": 2, "columns": ["t", "step"]}
    series, _, _ = series_from_docs([good, cut, odd])
    assert [s["rank"] for s in series] == [0]


def test_a_step_file_whose_loss_went_nan_is_read_as_the_monitor_wrote_it(tmp_path):
    """`json.dumps` writes NaN as the bare word `NaN`, which the fast JSON reader refuses: the
    file is read all the same, and the rank's first non-finite loss is the finding."""
    from rankscope.report.collect_steps import read_step_files

    rows = [[s, 10.0 + s, 2.0 if s < 30 else float("nan"), 64, 1.0] for s in range(1, 41)]
    doc = {"kind": "rankscope.steps", "rank": 0, "group": "g", "stride": 1,
           "columns": ["step", "t", "loss", "tokens", "grad_norm"], "rows": rows,
           "first_nonfinite": {"step": 30, "t": 40.0, "name": "loss", "value": "nan"}}  # fmt: skip
    name = file_name(0, "g", 1)
    (tmp_path / name).write_text(json.dumps(doc))
    assert "NaN" in (tmp_path / name).read_text()
    docs, notes = read_step_files(str(tmp_path), [(name, (tmp_path / name).stat().st_size)])
    assert notes == [] and len(docs) == 1
    series, health, _ = series_from_docs(docs)
    assert series[0]["samples"][29][2] != series[0]["samples"][29][2]  # NaN, kept as NaN
    nonfinite = [f for h in health for f in h["findings"] if f["kind"] == "non_finite"]
    assert nonfinite and nonfinite[0]["ranks"] == [0] and nonfinite[0]["step"] == 30, health
