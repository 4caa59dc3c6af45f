"""The report's trace, loss/throughput and environment sections from synthetic inputs (no Ray):
what the page says, and a page without the part whose input is missing or broken."""

from __future__ import annotations

import json
import re

from helpers.traces import T0 as TRACE_T0
from helpers.traces import synthetic_job
from rankscope.cli.output import to_json
from rankscope.doctor.analysis import compare_environments
from rankscope.doctor.collect import JobEnvironment
from rankscope.doctor.model import EnvironmentFacts, ProcessFacts
from rankscope.doctor.preflight.model import Check, ClusterFacts, PreflightReport, Status
from rankscope.monitor.model import RankSeries, StepSample
from rankscope.report.analysis import build_report
from rankscope.report.collect import collect_run
from rankscope.report.model import RunData
from rankscope.report.render import render_html
from rankscope.report.trends import monitor_data
from rankscope.serialize import plain
from rankscope.trace.analysis import split_collectives
from rankscope.trace.chrome import render_trace

T0 = 1_800_000_000.0


def _text(page: str) -> str:
    """The page as a user reads it: tags out, whitespace folded."""
    return " ".join(re.sub(r"<[^>]+>", " ", page).split())


def test_the_traces_split_each_ranks_step_and_name_the_straggler(tmp_path):
    job_dir = tmp_path / "runs" / "job1"
    job_dir.mkdir(parents=True)
    traces = synthetic_job(steps=20, slow_rank=2, extra_s=0.05)
    slices = split_collectives(traces, int((TRACE_T0 + 10) * 1e9))
    with open(job_dir / "trace-20261203-140000.json", "w") as f:
        render_trace(traces, slices, f.write)  # as enable_detailed_tracing() leaves it
    (job_dir / "trace-20261203-150000.json").write_text('{"traceEvents": [')  # cut short

    data = collect_run(str(job_dir), None, None)
    page = render_html(build_report(data, TRACE_T0 + 60))
    text = _text(page)
    assert 'id="section-trace"' in page
    # rank 0: 100 ms forward, 50 ms waiting for rank 2, 2 ms transfer, per step
    assert re.search(
        r"rank 0 \(Worker\) 10\.0\.0\.1 19 152\.0 ms 50\.0 ms \(33%\) 2\.0 ms \(1%\) "
        r"forward 100\.0 ms \(66%\)",
        text,
    ), text
    assert re.search(r"rank 2 \(Worker\) 10\.0\.0\.1 19 152\.0 ms 0\.0 ms \(0%\) 2\.0 ms", text)
    assert "forward 150.0 ms (99%)" in text
    assert re.search(r"trace: rank 2 \w", text)  # the straggler, a finding
    assert re.search(r"forward rank 2 150\.0 ms \d\d:\d\d:\d\d\.\d{3}", text)  # slowest spans
    assert str(job_dir / "trace-20261203-140000.json") in text
    assert "ui.perfetto.dev" in text
    assert "trace-20261203-150000.json: not readable as a trace (JSONDecodeError" in text
    # after the job, the steps/s chart comes from the trace's step markers, the straggler in red
    assert "4 ranks, steps 1-20 (step markers of trace-20261203-140000.json)" in text
    chart = page.split('aria-label="steps/s per rank over steps')[1].split("</svg>")[0]
    assert re.findall(
        r'stroke="#d62728" stroke-width="3" points="[^"]+"><title>([^<]+)', chart
    ) == ["rank 2"]
    assert re.search(r"rank 2 stands out \(straggler\): rank 2 computes 1\.49x", text)
    assert ">6.58</text>" in chart  # one step per 152 ms, at the top of the axis


def test_a_trace_without_step_markers_still_names_the_straggler(tmp_path):
    # verl's workers or a Ray Train loop left unchanged: collectives, no rankscope.step()
    job_dir = tmp_path / "runs" / "job1"
    job_dir.mkdir(parents=True)
    traces = synthetic_job(steps=20, slow_rank=2, extra_s=0.05)
    for trace in traces:
        trace.steps.clear()
    slices = split_collectives(traces, int((TRACE_T0 + 10) * 1e9))
    with open(job_dir / "trace-20261203-140000.json", "w") as f:
        render_trace(traces, slices, f.write)
    text = _text(render_html(build_report(collect_run(str(job_dir), None, None), TRACE_T0 + 60)))
    assert re.search(r"trace: rank 2 computes 1\.\d\dx the group median .* over the window", text)


def _series(rank: int, loss: list[float], step_s: float = 0.1) -> RankSeries:
    samples = tuple(StepSample(s, T0 + s * step_s, v, 4096.0) for s, v in enumerate(loss, start=1))
    return RankSeries(rank, "g", "10.0.0.1", "Worker", samples)


def test_loss_and_throughput_charts_draw_the_diverging_rank_in_red_and_name_it():
    falling = [1.0 - 0.01 * s for s in range(60)]
    diverging = [*falling[:30], *(0.7 + 0.05 * s for s in range(30))]
    ranks = [_series(r, diverging if r == 3 else falling) for r in range(4)]
    series, health = monitor_data(ranks)
    page = render_html(build_report(RunData("job1", "hub", series=series, health=health), T0))
    text = _text(page)
    assert "Loss and throughput" in text
    assert "4 ranks, steps 1-60" in text
    assert re.search(r"rank 3 stands out \(loss (divergence|disagreement)\): .*drawn in red", text)
    loss_chart = page.split('aria-label="loss per rank over steps"')[1].split("</svg>")[0]
    red = re.findall(r'stroke="#d62728" stroke-width="3" points="[^"]+"><title>([^<]+)', loss_chart)
    assert red == ["rank 3"]
    assert "step 1" in loss_chart and "step 60" in loss_chart  # the x axis is steps, not time
    assert 'aria-label="tokens/s per rank over steps (running median of 5 steps)"' in page
    assert "<script" not in page and "https://" not in page


def test_ranks_that_mark_no_steps_still_show_their_straggler_on_the_page():
    """verl's workers and a Ray Train loop left unchanged call no `rankscope.step()`: no chart,
    but their recorded collectives name the rank the others wait for."""
    from rankscope.hang.model import CallState, CollectiveRecord

    def calls(rank: int) -> tuple[CollectiveRecord, ...]:
        out, t = [], T0
        for seq in range(40):
            arrive = t + 0.1 + (0.1 if rank == 2 else 0.0)
            done = t + 0.201
            out.append(CollectiveRecord("0", seq, "all_reduce", ((4,),), ("float32",), arrive,
                                        done, CallState.COMPLETED, "train.py:9"))  # fmt: skip
            t = done
        return tuple(out)

    ranks = [RankSeries(r, "g", "10.0.0.1", "Worker", (), collectives=calls(r)) for r in range(4)]
    series, health = monitor_data(ranks)
    assert series == ()  # nothing to chart
    [found] = [f for h in health for f in h["findings"] if f["kind"] == "straggler"]
    assert found["ranks"] == [2]


def test_many_ranks_are_min_median_max_and_the_diverging_one_apart():
    falling = [1.0 - 0.01 * s for s in range(60)]
    diverging = [*falling[:30], *(0.7 + 0.05 * s for s in range(30))]
    ranks = [_series(r, diverging if r == 17 else falling) for r in range(40)]
    series, health = monitor_data(ranks)
    report = build_report(RunData("job1", "hub", series=series, health=health), T0)
    [loss, _] = next(s for s in report.sections if s.key == "trends").charts
    assert [(s.label, s.highlight) for s in loss.series] == [
        ("min over 39 ranks", False),
        ("median over 39 ranks", False),
        ("max over 39 ranks", False),
        ("rank 17", True),
    ]


def _facts(torch: str, shm: int = 8 << 30) -> EnvironmentFacts:
    return EnvironmentFacts("3.11.9", "Linux", "0.1", "2.40.0", torch, "12.1", "2.18", (), shm,
                            shm, {"NCCL_DEBUG": "WARN"})  # fmt: skip


def test_the_doctors_differences_between_ranks_and_nodes_are_a_section():
    processes = [
        ProcessFacts(f"rank {r}", "n1", _facts("2.3.1+cu121" if r != 2 else "2.4.0"), r, "g")
        for r in range(4)
    ]
    live = JobEnvironment("job1", processes, compare_environments(processes), [])
    shm = Check(
        "/dev/shm",
        Status.FAIL,
        "/dev/shm is 64 MiB on node-2",
        {"node-1": "16.0 GiB", "node-2": "64 MiB", "node-3": "16.0 GiB"},
        "docker run --shm-size=16g",
    )
    ok = Check("ray", Status.OK, "same Ray everywhere", {"node-1": "2.40.0"})
    saved = PreflightReport(ClusterFacts("auto", None, None, None), (), (shm, ok))
    data = RunData(
        "job1",
        "d",
        artifacts={"doctor.json": json.loads(to_json("doctor", saved))},  # `doctor --json`
        environment=(plain(live),),
    )
    report = build_report(data, T0)
    text = _text(render_html(report))
    assert "Environment (doctor)" in text
    summary = "live diagnose: 4 processes, 1 difference across ranks; doctor.json: 0 nodes, "
    assert summary + "2 checks, 1 not ok" in text
    torch = "torch differs across ranks (2.3.1+cu121 on 3, 2.4.0 on 1); rank 2 has 2.4.0"
    assert f"environment: {torch}" in text
    assert "doctor: /dev/shm: /dev/shm is 64 MiB on node-2" in text
    assert "node-2: 64 MiB; node-1: 16.0 GiB; node-3: 16.0 GiB" in text  # the odd node first
    assert report.verdict.startswith("environment: torch differs across ranks")
    assert "same Ray everywhere" not in text  # passed checks stay out of the way


def test_a_broken_input_costs_its_section_and_the_page_says_so():
    data = RunData(
        "job1",
        "d",
        events=(
            {"kind": "test.note", "time": T0, "payload": {"message": "hello"}},
            {"kind": "alert", "time": "soon", "payload": "disk full"},  # not what alerts write
        ),
        artifacts={"doctor.json": {"command": "doctor", "data": {"checks": [{"status": "fail"}]}}},
        series=({"rank": 0, "samples": [[1]]},),  # a row cut short
    )
    report = build_report(data, T0)
    assert [s.key for s in report.sections] == ["events"]
    assert [i.text for i in report.timeline] == ["hello"]  # the malformed event left out
    text = _text(render_html(report))
    for section in ("trends", "alerts", "environment"):
        assert re.search(
            rf"the {section} section is left out: its data could not be read \(\w+Error", text
        )
    assert "hello" in text  # the rest of the page is there


def test_work_no_node_can_host_is_the_verdict_and_a_section():
    """A live job whose actor asks more CPUs than any node has: the page's first sentence
    names it (why-pending's own analysis, narrowed to the job); another job's is left out."""
    from rankscope.resources.analysis import explain_pending
    from rankscope.resources.model import Demand, DemandKind, NodeResources

    node = NodeResources("n1", "10.0.0.1", {"CPU": 4.0}, {"CPU": 0.0})
    ours = Demand(DemandKind.ACTOR, "a1", "main.Evaluator", "PENDING_CREATION",
                  ({"CPU": 8.0},), job_id="01000000")  # fmt: skip
    theirs = Demand(DemandKind.ACTOR, "a2", "main.Other", "PENDING_CREATION",
                    ({"CPU": 16.0},), job_id="02000000")  # fmt: skip
    report = explain_pending([ours, theirs], [node], [])
    mine = [v for v in report.verdicts if v.demand.job_id == "01000000"]
    pending = ({"verdicts": plain(mine), "notes": ["read from Ray's GCS"]},)
    page = build_report(RunData("01000000", "test", pending=pending), 0.0)
    assert page.verdict.startswith("actor Evaluator can never be placed on this cluster: "), page
    assert "CPU" in page.verdict and "Other" not in page.verdict
    (section,) = [s for s in page.sections if s.key == "pending"]
    assert section.tables[0].rows[0][:2] == ("actor Evaluator", "infeasible")
    assert section.notes == ("read from Ray's GCS",)
    assert "Work Ray has not placed" in render_html(page)
