"""Tracing's pure parts on synthetic ranks: alignment, wait vs transfer, stragglers, the trace
file's validity, lanes, and the byte budget with a million spans."""

from __future__ import annotations

import io
import itertools
import json
from collections import defaultdict

import pytest

from helpers.traces import T0, status, synthetic_job
from rankscope.runtime.clock import ClockOffset
from rankscope.trace.analysis import split_collectives, summarize
from rankscope.trace.chrome import assign_lanes, render_trace, sample_to_budget
from rankscope.trace.model import RankTrace
from rankscope.trace.tasks import attach_tasks, ray_task, untraced_workers

MS = 1e-3


def test_collectives_split_into_wait_and_transfer_on_the_hubs_clock():
    offsets = {0: 0.0, 1: 0.25, 2: -0.4, 3: 1.5}  # rank 3's clock is 1.5 s behind
    traces = synthetic_job(offsets=offsets)
    slices = split_collectives(traces, round((T0 + 10) * 1e9))
    first = [per[0] for per in slices]
    assert [round(s.wait_ns / 1e6) for s in first] == [50, 50, 0, 50]
    assert [round(s.transfer_ns / 1e6) for s in first] == [2, 2, 2, 2]
    assert [s.last for s in first] == [False, False, True, False]
    ends = {s.end_ns for s in first}
    assert max(ends) - min(ends) < 1000  # aligned: the same instant on every rank (< 1 us)


def test_straggler_named_and_waits_longer_on_the_others():
    traces = synthetic_job(offsets={3: 0.7})
    slices = split_collectives(traces, round((T0 + 10) * 1e9))
    summary = summarize("job", traces, slices, round((T0 + 10) * 1e9),
                        path="x", bytes_written=0, events=0, dropped_events=0)  # fmt: skip
    named = [s.rank for s in summary.stragglers if s.is_straggler]
    assert named == [2]
    assert "rank 2" in summary.stragglers[0].why
    rows = {r.rank: r for r in summary.ranks}
    assert rows[2].wait_share < 0.01
    assert all(rows[r].wait_share > 0.2 for r in (0, 1, 3))
    assert rows[2].step_median_s is not None and abs(rows[2].step_median_s - 0.152) < 1e-3
    assert rows[2].last_arrivals == 20
    assert not summary.ok


def test_no_straggler_when_ranks_keep_pace():
    traces = synthetic_job(extra_s=0.0)
    slices = split_collectives(traces, round((T0 + 10) * 1e9))
    summary = summarize("job", traces, slices, round((T0 + 10) * 1e9),
                        path="x", bytes_written=0, events=0, dropped_events=0)  # fmt: skip
    assert summary.ok


@pytest.mark.parametrize("extra_s", [0.05, 0.0])
def test_ranks_that_never_mark_steps_are_scored_over_the_window(extra_s):
    # verl's workers and a Ray Train loop, unchanged: collectives, but no rankscope.step()
    traces = synthetic_job(extra_s=extra_s)
    for trace in traces:
        trace.steps.clear()
    end = round((T0 + 10) * 1e9)
    summary = summarize("job", traces, split_collectives(traces, end), end,
                        path="x", bytes_written=0, events=0, dropped_events=0)  # fmt: skip
    named = [s for s in summary.stragglers if s.is_straggler]
    if extra_s:
        assert [s.rank for s in named] == [2]
        assert "the group median" in named[0].why and "over the window" in named[0].why
    else:
        assert named == [] and summary.ok


def trace_problems(doc: dict) -> list[str]:
    """Trace Event Format checks: metadata names every track, X slices nest on each track,
    timestamps are ordered within each track, numbers are numbers."""
    problems = []
    events = doc["traceEvents"]
    named_threads = {(e["pid"], e["tid"]) for e in events
                     if e["ph"] == "M" and e["name"] == "thread_name"}  # fmt: skip
    named_procs = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    tracks = defaultdict(list)
    for e in events:
        if e["ph"] in ("X", "i"):
            tracks[(e["pid"], e["tid"])].append(e)
        if e["ph"] in ("X", "i", "C"):
            if not isinstance(e["ts"], int | float) or e["ts"] < 0:
                problems.append(f"bad ts {e}")
            if e["pid"] not in named_procs:
                problems.append(f"process {e['pid']} has no name")
    for key, items in tracks.items():
        if key not in named_threads:
            problems.append(f"track {key} has no name")
        xs = [e for e in items if e["ph"] == "X"]
        if [e["ts"] for e in xs] != sorted(e["ts"] for e in xs):
            problems.append(f"track {key}: timestamps out of order")
        stack: list[float] = []
        for e in sorted(xs, key=lambda e: (e["ts"], -e["dur"])):
            if e["dur"] < 0:
                problems.append(f"negative dur {e}")
            while stack and stack[-1] <= e["ts"] + 1e-9:
                stack.pop()
            if stack and e["ts"] + e["dur"] > stack[-1] + 1e-6:
                problems.append(f"track {key}: {e['name']} at {e['ts']} overlaps its parent")
            stack.append(e["ts"] + e["dur"])
    return problems


def test_trace_file_is_valid_trace_event_format():
    traces = synthetic_job(offsets={1: 0.3})
    # async overlap on one thread: must go to a lane of its own, not break nesting
    t0 = traces[0].started_ns
    traces[0].spans += [("a", t0 + 10, t0 + 500, 7, None), ("b", t0 + 100, t0 + 900, 7, None)]
    traces[0].threads[7] = "loop"
    traces[0].counters.append((traces[0].started_ns + 5, 2**30, None, None))
    slices = split_collectives(traces, round((T0 + 10) * 1e9))
    buf = io.StringIO()
    stats = render_trace(traces, slices, buf.write)
    doc = json.loads(buf.getvalue())
    assert trace_problems(doc) == []
    assert stats.bytes == len(buf.getvalue().encode()) and stats.dropped == 0
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert "rank 2 (Worker) 10.0.0.1" in names
    assert "rank 0 (Worker) 10.0.0.1 · loop (overlap 1)" in names
    steps = [e for e in doc["traceEvents"] if e["ph"] == "i"]
    assert len(steps) == 80
    waits = [e for e in doc["traceEvents"] if e["name"] == "wait"]
    assert len(waits) == 60  # every all_reduce of ranks 0, 1, 3; none on rank 2
    assert doc["otherData"]["clock_offsets"]["rank 1 (Worker) 10.0.0.1"]["error_ms"] == 0.5


def test_lanes_keep_each_track_nested():
    assert assign_lanes([(0, 10), (2, 4), (3, 12)]) == [0, 0, 1]
    assert assign_lanes([(0, 10), (2, 4), (4, 6), (10, 12)]) == [0, 0, 0, 0]


def test_byte_budget_holds_with_a_million_spans():
    """1,000,000 spans from 4 ranks into a 20 MB budget: the file stays within it, repeated
    names are sampled, rare ones kept, and every left-out span is counted."""
    traces = []
    for rank in range(4):
        trace = RankTrace(status(rank))
        base = round(T0 * 1e9)
        trace.started_ns = base
        trace.spans = [
            ("hot", base + i * 1000, base + i * 1000 + 500, 1, None) for i in range(249_990)
        ]
        trace.spans += [(f"rare{i}", base + 1, base + 2, 2, None) for i in range(10)]
        traces.append(trace)
    budget = 20 * 2**20
    buf = io.StringIO()
    stats = render_trace(traces, [[] for _ in traces], buf.write, budget=budget)
    text = buf.getvalue()
    assert len(text.encode()) == stats.bytes <= budget
    doc = json.loads(text)
    kept = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(kept) + stats.dropped == 1_000_000
    assert stats.dropped > 600_000
    assert sum(1 for e in kept if e["name"].startswith("rare")) == 40
    assert doc["otherData"]["dropped_by_name"] == {"hot": stats.dropped}


def test_sampling_is_even_and_counts_drops():
    items = [("a", f"x{i:07d}") for i in range(100)] + [("b", "y" * 8)]
    kept, dropped = sample_to_budget(items, 10 * 25)
    assert sum(len(t) + 2 for _, t in kept) <= 250
    assert [k for k, _ in kept].count("b") == 1
    assert dropped["a"] == 100 - (len(kept) - 1)
    positions = [int(t[1:]) for k, t in kept if k == "a"]
    gaps = {b - a for a, b in itertools.pairwise(positions)}
    assert len(gaps) <= 2  # evenly spaced


def test_clock_offset_keeps_the_minimum_round_trip_sample():
    clock = ClockOffset()
    # hub is 2.0 s ahead; the first sample has a slow return path (skewed), the second is tight
    clock.add(sent=100.0, hub_received=102.001, hub_replied=102.501, received=100.9)
    clock.add(sent=200.0, hub_received=202.001, hub_replied=202.501, received=200.503)
    estimate = clock.estimate()
    assert estimate is not None
    assert abs(estimate.offset_s - 2.0) <= estimate.error_s
    assert estimate.error_s < 0.002 and estimate.samples == 2


def task_state(name: str, pid: int, submitted: float, running: float | None, end: float | None):
    """A task as Ray's state API returns it (detail=True), times in epoch seconds."""
    events = [{"state": "PENDING_NODE_ASSIGNMENT", "created_ms": submitted * 1e3}]
    if running is not None:
        events.append({"state": "RUNNING", "created_ms": running * 1e3})
    if end is not None:
        events.append({"state": "FINISHED", "created_ms": end * 1e3})
    state = "FINISHED" if end else ("RUNNING" if running else "PENDING_NODE_ASSIGNMENT")
    return {"task_id": f"t-{name}", "name": name, "type": "ACTOR_TASK", "state": state,
            "node_id": "n-10.0.0.1", "worker_pid": pid, "events": events}  # fmt: skip


def test_ray_tasks_go_to_their_worker_with_scheduling_delay_idle_and_pending():
    traces = synthetic_job(steps=10, extra_s=0.0)  # windows: T0 .. T0 + 2 s
    states = [
        task_state("train", 1000, T0 - 0.5, T0 - 0.4, T0 + 1.0),  # rank 0 busy for 1 s of 2
        task_state("eval", 1001, T0 + 0.1, T0 + 0.3, T0 + 1.9),
        task_state("elsewhere", 4242, T0, T0 + 0.1, T0 + 0.2),
        task_state("stuck", 0, T0 - 30, None, None),
        {**task_state("child", 1002, T0 + 0.5, T0 + 0.6, T0 + 0.7), "parent_task_id": "t-train"},
    ]
    tasks = [t for t in (ray_task(s) for s in states) if t is not None]
    assert tasks[1].pending_ns is not None and abs(tasks[1].pending_ns - 0.2e9) < 1e3
    end = round((T0 + 2) * 1e9)
    outside = attach_tasks(traces, tasks, (round(T0 * 1e9), end))
    assert [t.name for t in outside] == ["elsewhere"]
    assert [t.name for t in traces[2].tasks] == ["child"]
    assert [t.name for t in traces[0].tasks] == ["train"]
    slices = split_collectives(traces, end)
    summary = summarize("job", traces, slices, end, path="x", bytes_written=0, events=0,
                        dropped_events=0, tasks=tasks)  # fmt: skip
    rows = {r.rank: r for r in summary.ranks}
    assert rows[0].idle_share is not None and abs(rows[0].idle_share - 0.5) < 0.01
    assert rows[1].idle_share is not None and abs(rows[1].idle_share - 0.2) < 0.01
    assert summary.pending_tasks and "stuck" in summary.pending_tasks[0]
    assert not summary.ok
    buf = io.StringIO()
    render_trace(traces, slices, buf.write)
    doc = json.loads(buf.getvalue())
    assert trace_problems(doc) == []
    [train] = [e for e in doc["traceEvents"] if e["name"] == "train"]
    assert train["args"]["scheduling_delay_ms"] == 100.0 and train["args"]["worker_pid"] == 1000
    [child] = [e for e in doc["traceEvents"] if e["name"] == "child"]
    start, finish = (e for e in doc["traceEvents"] if e.get("cat") == "ray")
    assert start["ph"] == "s" and (start["pid"], start["tid"]) == (train["pid"], train["tid"])
    assert train["ts"] <= start["ts"] <= train["ts"] + train["dur"]  # submitted inside "train"
    assert finish["ph"] == "f" and (finish["tid"], finish["ts"]) == (child["tid"], child["ts"])

    # a task that ran in a worker with no probe gets a track of its worker, on its node
    workers = untraced_workers(outside, "job", {"n-10.0.0.1": "10.0.0.1"}, (round(T0 * 1e9), end))
    buf = io.StringIO()
    render_trace(traces + workers, [*slices, []], buf.write)
    doc = json.loads(buf.getvalue())
    assert trace_problems(doc) == []
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
              if e["name"] == "thread_name"}  # fmt: skip
    [elsewhere] = [e for e in doc["traceEvents"] if e["name"] == "elsewhere"]
    assert tracks[(elsewhere["pid"], elsewhere["tid"])] == (
        "pid 4242 (untraced worker) 10.0.0.1 · ray tasks"
    )


def test_durations_parse_with_units_and_bad_ones_say_how():
    import pytest

    from rankscope.errors import UserError
    from rankscope.trace.cli import parse_duration

    assert [parse_duration(t) for t in ("10s", "500ms", "2m", "7.5")] == [10.0, 0.5, 120.0, 7.5]
    with pytest.raises(UserError, match=r"e\.g\. 10s"):
        parse_duration("ten seconds")


def test_bad_output_folder_fails_before_recording():
    from typer.testing import CliRunner

    import rankscope.cli.main as cli

    result = CliRunner().invoke(cli.app, ["trace", "-o", "/nonexistent/t.json", "--ranks", "0"])
    assert result.exit_code == 2
    assert "folder /nonexistent does not exist" in result.output


def test_a_drivers_submit_span_gets_an_arrow_to_the_task_it_submitted():
    traces = synthetic_job(steps=4, extra_s=0.0)
    at = round((T0 + 0.05) * 1e9)
    traces[0].spans.append(("submit eval", at, at + 100_000, 7, {"task_id": "t-eval"}))
    tasks = [ray_task(task_state("eval", 1001, T0 + 0.05, T0 + 0.3, T0 + 0.6))]
    attach_tasks(traces, [t for t in tasks if t is not None], (round(T0 * 1e9), at * 2))
    buf = io.StringIO()
    render_trace(traces, split_collectives(traces, round((T0 + 2) * 1e9)), buf.write)
    doc = json.loads(buf.getvalue())
    assert trace_problems(doc) == []
    [submit] = [e for e in doc["traceEvents"] if e["name"] == "submit eval"]
    [run] = [e for e in doc["traceEvents"] if e["name"] == "eval"]
    start, finish = (e for e in doc["traceEvents"] if e.get("cat") == "ray")
    assert (start["pid"], start["tid"]) == (submit["pid"], submit["tid"])  # from the driver
    assert submit["ts"] <= start["ts"] <= submit["ts"] + submit["dur"]
    assert (finish["pid"], finish["tid"], finish["ts"]) == (run["pid"], run["tid"], run["ts"])
