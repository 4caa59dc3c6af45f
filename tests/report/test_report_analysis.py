"""The job report from synthetic run data (no Ray): verdict, timeline, sections, size bounds."""

from __future__ import annotations

from rankscope.report.analysis import MAX_TIMELINE, build_report
from rankscope.report.model import RunData, Severity
from rankscope.report.render import render_html
from rankscope.report.sections import MAX_ROWS

NOW = 1_800_000_000.0
HANG = (
    "group 0 (4 ranks): ranks 0-2 wait in all_reduce #7 (float32[4]) for 9.0 s; "
    "rank 3 never entered #7, its last completed collective is #6; "
    "rank 3 is in load_batch train.py:41"
)


def _process(rank: int, state: str = "alive", pid: int | None = None) -> dict:
    context = {"rank": rank, "pid": pid or 1000 + rank, "hostname": "n1", "node_ip": "10.0.0.1",
               "group": "10.0.0.1:29500", "actor_class": "Worker"}  # fmt: skip
    return {
        "info": {"probe_id": f"p{rank}", "context": context},
        "state": state,
        "last_seen": NOW - 5,
        "progress": {"step": 7},
    }


def _event(kind: str, payload: dict, t: float = NOW - 30, probe: str = "p0") -> dict:
    return {"kind": kind, "time": t, "payload": payload, "probe_id": probe}


def test_the_verdict_is_the_hang_and_names_the_rank_that_never_came():
    data = RunData(
        "job1",
        "/runs/job1",
        events=(_event("hang_report", {"path": "/runs/job1/h.json", "findings": [HANG]}),),
        processes=tuple(_process(r) for r in range(4)),
        hang=({"findings": [{"kind": "hang", "message": HANG}], "groups": []},),
    )
    report = build_report(data, NOW)
    assert report.verdict.startswith(HANG)
    assert not report.ok
    assert [s.key for s in report.sections] == ["ranks", "hang", "events"]
    [item] = [i for i in report.timeline if i.kind == "hang_report"]
    assert item.severity is Severity.FAIL and item.who == "rank 0"


def test_a_dead_rank_is_a_finding_with_its_cause_and_on_the_timeline():
    data = RunData(
        "job1",
        "hub",
        processes=(_process(0), _process(1, "dead")),
        deaths={"p1": "Ray: worker died (exit code 1)"},
    )
    report = build_report(data, NOW)
    assert report.verdict == "rank 1 is dead: Ray: worker died (exit code 1)"
    [death] = [i for i in report.timeline if i.kind == "death"]
    assert death.who == "rank 1" and death.severity is Severity.FAIL


def test_consistency_and_memory_verdicts_come_from_their_events():
    data = RunData(
        "job1",
        "d",
        events=(
            _event(
                "consistency",
                {
                    "operation_name": "gradient_sync",
                    "ok": False,
                    "summary": "rank 2 differs in fc.weight",
                    "ranks": [0, 1, 2],
                    "differing_total": 1,
                },
            ),
            _event("memory.oom", {"label": "rank 1", "summary": "CUDA OOM: fragmentation"}),
        ),
    )
    report = build_report(data, NOW)
    assert report.verdict.startswith("gradient_sync: rank 2 differs in fc.weight")
    memory = next(s for s in report.sections if s.key == "memory")
    assert memory.findings == ("rank 1: CUDA OOM: fragmentation",)


def test_a_leak_is_the_verdict_over_a_monitors_straggler():
    """The leak job of `make demo`: a mild straggler the monitor saw must not hide the leak."""
    leak = {"metric": "rss", "leak": True, "reason": "troughs climb 8 MiB/step"}
    reply = {"snapshot": {"pid": 3, "rss": 2**30}, "leaks": [leak]}
    profile = {"data": {"memory": {"ranks": [{"pid": 3, "label": "rank 3"}]}, "replies": [reply]}}
    straggler = {"kind": "straggler", "evidence": "rank 1 slowed to 1.41x", "advice": "look"}
    data = RunData(
        "job1",
        "d",
        artifacts={"memory-profile-1.json": profile},
        health=({"findings": [straggler]},),
        top=({"ranks": [{"rank": 1, "step": 9}]},),
    )
    report = build_report(data, NOW)
    assert report.verdict.startswith("rank 3: rss leaks: troughs climb 8 MiB/step")
    assert "(1 more finding below)" in report.verdict


def test_a_diagnose_profiles_leak_stays_beside_the_live_memory_trend():
    """The report reads the ranks' live trend on every look: a leak `diagnose` found in its
    newest profile is still named, and a rank only the live trend holds is added."""
    profile = {
        "data": {
            "memory": {"ranks": [{"pid": 3, "label": "rank 3"}]},
            "replies": [{"snapshot": {"pid": 3, "rss": 2**30},
                         "leaks": [{"metric": "rss", "leak": True, "reason": "grows 4 MiB/step"}]}],
        }
    }  # fmt: skip
    live = {
        "data": {
            "memory": {"ranks": [{"pid": 3, "label": "rank 3"}, {"pid": 4, "label": "rank 4"}]},
            "replies": [{"snapshot": {"pid": p, "rss": 2**29}, "leaks": []} for p in (3, 4)],
        }
    }
    data = RunData("job1", "d", artifacts={"memory-profile-1.json": profile, "memory-live": live})
    memory = next(s for s in build_report(data, NOW).sections if s.key == "memory")
    assert memory.findings == ("rank 3: rss leaks: grows 4 MiB/step",)
    assert [row[::2] for row in memory.tables[0].rows] == [("rank 3", "rss"), ("rank 4", "no leak")]


def test_an_empty_run_says_so():
    report = build_report(RunData("job1", "/runs/job1"), NOW)
    assert report.ok and report.sections == () and report.timeline == ()
    assert report.verdict.startswith("nothing recorded for job job1 yet")
    assert "nothing recorded" in render_html(report)


def test_a_4096_rank_job_makes_a_small_page_that_shows_the_odd_ranks():
    processes = [_process(r) for r in range(4096)]
    processes[3001] = _process(3001, "dead")
    history = [{"time": NOW - 600 + i, "rss": 2**30 + i * 2**20, "pid": 0} for i in range(600)]
    replies = [{"snapshot": {"pid": r, "rss": 2**30}, "history": history} for r in range(4096)]
    ranks = [{"pid": r, "label": f"rank {r}"} for r in range(4096)]
    events = [_event("probe.registered", {"context": p["info"]["context"]}, probe=f"p{i}")
              for i, p in enumerate(processes)]  # fmt: skip
    data = RunData(
        "big",
        "d",
        events=tuple(events),
        artifacts={
            "memory-profile-1.json": {"data": {"memory": {"ranks": ranks}, "replies": replies}}
        },
        processes=tuple(processes),
    )
    report = build_report(data, NOW)
    table = next(s for s in report.sections if s.key == "ranks").tables[0]
    assert len(table.rows) == MAX_ROWS and table.rows[0][0] == "rank 3001"
    assert table.omitted == "4,032 more alive rows not shown"
    chart = next(s for s in report.sections if s.key == "memory").charts[0]
    assert [s.label for s in chart.series] == [
        "min over 4096 ranks",
        "median over 4096 ranks",
        "max over 4096 ranks",
    ]
    assert len(report.timeline) <= MAX_TIMELINE
    page = render_html(report)
    assert len(page.encode()) < 5 * 2**20


def test_the_page_is_self_contained():
    data = RunData("job1", "d", events=(_event("hang_report", {"findings": [HANG]}),))
    page = render_html(build_report(data, NOW))
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert "default-src 'none'" in page  # the browser refuses any request the page would make


def test_active_alerts_and_the_first_nan_are_findings_and_traces_say_how_to_open_them():
    burst = "rank 1: 12 ERROR records in 60 s"
    data = RunData(
        "job1",
        "d",
        events=(
            _event("monitor.non_finite", {"step": 12, "what": "grad_norm on rank 1"}, NOW - 40),
            _event(
                "alert",
                {
                    "rule": "memory",
                    "severity": "warning",
                    "rank": 2,
                    "message": "rank 2: host memory at 93%",
                },
                NOW - 30,
            ),
            _event(
                "alert",
                {"rule": "errors", "severity": "error", "rank": 1, "message": burst},
                NOW - 20,
            ),
            _event("alert_resolved", {"rule": "memory", "rank": 2}, NOW - 10),
        ),
        files=(("events.jsonl", 100), ("trace-20261203-140000.json", 2**20)),
    )
    report = build_report(data, NOW)
    assert report.verdict.startswith("first non-finite value: grad_norm on rank 1 at step 12")
    by_key = {s.key: s for s in report.sections}
    assert by_key["alerts"].findings == (burst,)  # the memory alert was resolved
    assert by_key["alerts"].summary == "2 alerts, 1 active"
    trace_row = by_key["files"].tables[0].rows[1]
    assert trace_row[0].startswith("trace-") and "ui.perfetto.dev" in trace_row[2]
    [error] = [i for i in report.timeline if i.text == burst]
    assert error.severity is Severity.FAIL and error.who == "rank 1"


def test_the_monitors_live_findings_and_each_ranks_steps_are_the_training_health_section():
    straggler = {
        "kind": "straggler",
        "evidence": "rank 2 computes 1.45x the median rank of its group",
        "advice": "look at rank 2's node",
    }
    row = {"rank": 2, "group": "g", "step": 80, "step_s": 0.09, "tokens_per_s": 1200.0,
           "wait_s": 0.001, "straggler": 1.45, "loss": 0.31}  # fmt: skip
    data = RunData("job1", "hub", health=({"findings": [straggler]},), top=({"ranks": [row]},))
    report = build_report(data, NOW)
    assert report.verdict.startswith("straggler: rank 2 computes 1.45x the median rank")
    [health] = report.sections
    assert health.tables[0].rows == (
        ("2", "g", "80", "90.0 ms", "1,200", "1.0 ms", "1.45x", "0.31"),
    )


def test_logs_fold_across_ranks_with_each_numbers_spread_and_errors_are_findings():
    def logs(rank: int) -> dict:
        loss = {"level": "INFO", "template": "loss=<n>", "count": 10,
                "low": [0.3 + rank / 100], "high": [0.5 + rank / 100]}  # fmt: skip
        oom = {"level": "ERROR", "template": "CUDA out of memory", "count": 1}
        process = _process(rank)
        process["summaries"] = {"logs": {"templates": [loss, oom] if rank == 1 else [loss]}}
        return process

    data = RunData("job1", "hub", processes=tuple(logs(r) for r in range(4)))
    report = build_report(data, NOW)
    section = next(s for s in report.sections if s.key == "logs")
    assert section.findings == ("rank 1: CUDA out of memory (x1)",)
    assert section.tables[0].rows[0] == ("INFO", "ranks 0-3", "40", "loss=0.3..0.53")
