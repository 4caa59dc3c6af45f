"""Stack grouping, rank specs and rendering on synthetic per-rank data (no Ray)."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from rankscope.cli.output import to_json
from rankscope.context import RankContext
from rankscope.errors import BadRankSpec
from rankscope.ranks import format_ranks, parse_rank_spec
from rankscope.runtime.protocol import ProbeInfo, ProbeState, ProbeStatus, Progress
from rankscope.stacks.analysis import (
    CONFIRM_SAMPLE,
    LONG_WAIT_S,
    confirm_sample,
    confirmed,
    confirmed_by_sample,
    group_stacks,
    summarize,
    waited_long,
)
from rankscope.stacks.model import Frame, ProcessStacks, StackReport, ThreadStack
from rankscope.stacks.render import render_stacks

LIB = "/venv/lib/python3.11/site-packages/"
RAY_LOOP = Frame("main_loop", LIB + "ray/_private/worker.py", 900, True)
ALL_REDUCE = [
    Frame("all_reduce", LIB + "torch/distributed/distributed_c10d.py", 2500, True),
    Frame("wrapper", LIB + "torch/distributed/c10d_logger.py", 83, True),
    Frame("train_step", "/job/train.py", 88, False),
    Frame("train", "/job/train.py", 40, False),
    RAY_LOOP,
]
LOAD_BATCH = [Frame("load_batch", "/job/data.py", 41, False), *ALL_REDUCE[3:]]


NOW = time.time()
GROUP = "10.0.0.1:29500"


def _process(
    rank: int | None,
    frames: list[Frame],
    pid: int | None = None,
    *,
    stepped_ago: float | None = 0.0,
    step: int = 3,
    group: str | None = GROUP,
    train_thread: bool = False,
) -> ProcessStacks:
    """One process's stacks; `stepped_ago` None: it never called rankscope.step().

    `train_thread`: as Ray Train runs it, the frames in a thread of their own while the main
    thread idles in Ray's task loop.
    """
    pid = pid if pid is not None else 1000 + (rank or 0)
    ctx = RankContext(
        rank,
        rank,
        8,
        "node-a",
        "10.0.0.1",
        "host-a",
        pid,
        "01000000",
        "actor",
        "Worker",
        None,
        "env",
        group if rank is not None else None,
    )
    progress = Progress(0, NOW - 600) if stepped_ago is None else Progress(step, NOW - stepped_ago)
    status = ProbeStatus(
        ProbeInfo(f"p{pid}", ctx, "0.1.0", 0.0), ProbeState.ALIVE, 0.0, NOW, progress, 0, 0
    )
    if train_thread:
        threads = (
            ThreadStack("MainThread", 1, True, (RAY_LOOP,)),
            ThreadStack("TrainThread", 3, False, tuple(frames)),
        )
    else:
        threads = (
            ThreadStack("MainThread", 1, True, tuple(frames)),
            ThreadStack("PythonGCThread", 2, False, (RAY_LOOP,)),
        )
    return ProcessStacks(status, threads, "probe")


def _eight_ranks_rank_3_elsewhere(stepped_ago: float | None = 30.0, **kw):
    """Ranks 0-2,4-7 in all_reduce, rank 3 loading data; none stepped for 30 s."""
    return [
        _process(r, LOAD_BATCH if r == 3 else ALL_REDUCE, stepped_ago=stepped_ago, **kw)
        for r in range(8)
    ]


def test_identical_stacks_group_and_the_odd_one_comes_first():
    report = group_stacks("01000000", _eight_ranks_rank_3_elsewhere())

    busy = [g for g in report.groups if not g.idle]
    assert [(g.label, g.headline) for g in busy] == [
        ("rank 3", "load_batch data.py:41"),
        ("ranks 0-2,4-7", "all_reduce <- train_step train.py:88"),
    ]
    assert report.groups[-1].idle and report.groups[-1].label == "ranks 0-7"


def test_summary_names_the_outlier():
    report = group_stacks("01000000", _eight_ranks_rank_3_elsewhere(), now=NOW)
    assert summarize(report) == (
        "ranks 0-2,4-7 wait in all_reduce <- train_step train.py:88; "
        "rank 3 is elsewhere: load_batch data.py:41"
    )
    [finding] = report.findings
    assert (finding.group, finding.waiting, finding.elsewhere) == (
        GROUP,
        (0, 1, 2, 4, 5, 6, 7),
        (3,),
    )
    assert finding.where == "all_reduce <- train_step train.py:88" and not report.ok


def test_different_places_while_every_rank_steps_is_no_finding():
    """A rank waits in all_reduce for a slower one many times a second: that is training."""
    report = group_stacks("j", _eight_ranks_rank_3_elsewhere(stepped_ago=0.2), now=NOW)
    assert report.findings == () and report.ok and summarize(report) is None


def test_how_long_ago_a_rank_stepped_is_told_when_its_probe_answered():
    """Grouped 30 s after the ranks answered (thousands of them, a slow look): each had
    stepped 0.2 s before it answered, so they train; py-spy's stacks have no such time."""
    answered = [replace(p, taken_at=NOW) for p in _eight_ranks_rank_3_elsewhere(stepped_ago=0.2)]
    assert group_stacks("j", answered, now=NOW + 30).findings == ()

    spied = [replace(p, source="py-spy") for p in _eight_ranks_rank_3_elsewhere(stepped_ago=0.2)]
    [finding] = group_stacks("j", spied, now=NOW + 30).findings
    assert finding.elsewhere == (3,)


def _waited(processes: list[ProcessStacks], seconds: dict[int, float]) -> list[ProcessStacks]:
    """`processes` as their probes answered at NOW, each rank in `seconds` in its collective
    for that long (its recorder's `waiting_since`)."""
    out = []
    for p in processes:
        since = NOW - seconds[p.status.context.rank] if p.status.context.rank in seconds else None
        progress = replace(p.status.progress, waiting_since=since)
        out.append(replace(p, status=replace(p.status, progress=progress), taken_at=NOW))
    return out


def test_ranks_that_waited_long_in_their_collective_need_no_second_look():
    eight = _eight_ranks_rank_3_elsewhere()
    long_ago = _waited(eight, {r: LONG_WAIT_S + 25 for r in range(8) if r != 3})
    report = group_stacks("j", long_ago, now=NOW + 3)
    assert waited_long(report) == report.findings and len(report.findings) == 1
    waiting = [m for g in report.groups for m in g.members if m.active and m.rank != 3]
    assert {round(m.waited_s) for m in waiting} == {LONG_WAIT_S + 25}

    just_now = _waited(eight, {r: 0.4 for r in range(8) if r != 3})  # a normal wait, maybe
    assert waited_long(group_stacks("j", just_now, now=NOW)) == ()
    one_unknown = _waited(eight, {r: 60.0 for r in range(8) if r not in (3, 5)})
    assert waited_long(group_stacks("j", one_unknown, now=NOW)) == ()
    spied = [replace(p, source="py-spy", taken_at=None) for p in long_ago]
    assert waited_long(group_stacks("j", spied, now=NOW)) == ()  # no recorder's word


def test_without_steps_ranks_waiting_in_a_collective_are_a_finding():
    """No rankscope.step() (a job with the setup hook only): the stacks alone tell."""
    report = group_stacks("j", _eight_ranks_rank_3_elsewhere(stepped_ago=None), now=NOW)
    [finding] = report.findings
    assert finding.elsewhere == (3,) and finding.message.startswith("ranks 0-2,4-7 wait in")


def test_one_rank_that_stopped_stepping_is_enough():
    ranks = _eight_ranks_rank_3_elsewhere(stepped_ago=0.2)
    ranks[3] = _process(3, LOAD_BATCH, stepped_ago=45.0)
    [finding] = group_stacks("j", ranks, now=NOW).findings
    assert finding.elsewhere == (3,)


def test_stalled_ranks_outside_a_collective_are_a_finding():
    wait = [Frame("wait_for_peer", "/job/sync.py", 12, False), *ALL_REDUCE[3:]]
    ranks = [_process(r, LOAD_BATCH if r == 3 else wait, stepped_ago=20.0) for r in range(4)]
    [finding] = group_stacks("j", ranks, now=NOW).findings
    assert finding.message == (
        "ranks 0-2 are stalled in wait_for_peer sync.py:12; "
        "rank 3 is elsewhere: load_batch data.py:41"
    )


def test_ranks_in_different_user_code_without_steps_are_no_finding():
    """Nobody waits in a collective and progress is unknown: nothing says they are stuck."""
    ranks = [
        _process(r, LOAD_BATCH if r == 3 else ALL_REDUCE[2:], stepped_ago=None) for r in range(4)
    ]
    assert group_stacks("j", ranks, now=NOW).findings == ()


def test_every_rank_in_the_same_collective_is_no_finding_here():
    """All ranks in one place: whatever is wrong, no rank is elsewhere (`hang` looks deeper)."""
    ranks = [_process(r, ALL_REDUCE, stepped_ago=60.0) for r in range(4)]
    assert group_stacks("j", ranks, now=NOW).findings == ()


def test_processes_without_a_rank_take_no_part():
    """Ray Train's controller or verl's driver-side actors are always somewhere else."""
    ranks = [_process(r, ALL_REDUCE, stepped_ago=None) for r in range(4)]
    controller = _process(None, LOAD_BATCH, pid=77, stepped_ago=None)
    assert group_stacks("j", [*ranks, controller], now=NOW).findings == ()


def test_each_group_of_ranks_is_judged_on_its_own():
    """verl: two worker groups in one job, each with ranks 0..N-1."""
    actor = [
        _process(
            r, LOAD_BATCH if r == 1 else ALL_REDUCE, pid=100 + r, group="h:1", stepped_ago=None
        )
        for r in range(2)
    ]
    critic = [_process(r, LOAD_BATCH, pid=200 + r, group="h:2", stepped_ago=None) for r in range(2)]
    [finding] = group_stacks("j", [*actor, *critic], now=NOW).findings
    assert finding.group == "h:1" and finding.waiting == (0,) and finding.elsewhere == (1,)
    assert finding.message == (
        "group h:1: rank 0 waits in all_reduce <- train_step train.py:88; "
        "rank 1 is elsewhere: load_batch data.py:41"
    )


def test_where_a_rank_is_comes_from_its_busy_thread():
    """Ray Train: the loop runs in a thread of its own; the main threads all idle alike."""
    ranks = _eight_ranks_rank_3_elsewhere(train_thread=True)
    [finding] = group_stacks("j", ranks, now=NOW).findings
    assert finding.waiting == (0, 1, 2, 4, 5, 6, 7) and finding.elsewhere == (3,)


def test_a_second_look_keeps_a_finding_only_when_nothing_moved():
    first = group_stacks("j", _eight_ranks_rank_3_elsewhere(stepped_ago=None), now=NOW)
    same = group_stacks("j", _eight_ranks_rank_3_elsewhere(stepped_ago=None), now=NOW + 1)
    assert confirmed(first, same).findings == first.findings

    moved = _eight_ranks_rank_3_elsewhere(stepped_ago=None)
    moved[3] = _process(3, ALL_REDUCE[2:], stepped_ago=None)  # rank 3 got on with its step
    assert confirmed(first, group_stacks("j", moved, now=NOW + 1)).findings == ()

    stepped = group_stacks("j", _eight_ranks_rank_3_elsewhere(step=4), now=NOW + 1)
    stalled = group_stacks("j", _eight_ranks_rank_3_elsewhere(), now=NOW)
    assert stalled.findings and confirmed(stalled, stepped).findings == ()


def _thousand_ranks(*, moved: int | None = None, step: int = 3) -> list[ProcessStacks]:
    """Ranks 0-999 stalled in all_reduce but ranks 500 and 900 in the data loader; `moved`:
    that rank got on with its step (in all_reduce's caller)."""
    out = []
    for rank in range(1000):
        frames = LOAD_BATCH if rank in (500, 900) else ALL_REDUCE
        if rank == moved:
            frames = ALL_REDUCE[2:]
        out.append(_process(rank, frames, stepped_ago=60.0, step=step))
    return out


def test_a_sampled_second_look_confirms_a_large_group_with_a_sample_of_its_ranks():
    first = group_stacks("j", _thousand_ranks(), now=NOW)
    [finding] = first.findings
    assert finding.elsewhere == (500, 900)
    sample = confirm_sample(first)
    assert {(GROUP, 500), (GROUP, 900)} <= sample
    assert len(sample) <= 2 + CONFIRM_SAMPLE

    def again(processes: list[ProcessStacks]) -> StackReport:
        looked = [p for p in processes if (p.status.context.group, p.status.context.rank) in sample]
        return group_stacks("j", looked, now=NOW + 1)

    assert confirmed_by_sample(first, again(_thousand_ranks())).findings == first.findings
    assert confirmed_by_sample(first, again(_thousand_ranks(moved=500))).findings == ()
    sampled_waiter = min(rank for _, rank in sample)
    moved = again(_thousand_ranks(moved=sampled_waiter))
    assert confirmed_by_sample(first, moved).findings == ()
    assert confirmed_by_sample(first, again(_thousand_ranks(step=4))).findings == ()
    assert confirmed_by_sample(first, group_stacks("j", [], now=NOW + 1)).findings == ()


def test_the_finding_and_its_ranks_are_in_the_json():
    report = group_stacks("01000000", _eight_ranks_rank_3_elsewhere(), now=NOW)
    data = json.loads(to_json("stacks", [report]))["data"][0]
    assert data["ok"] is False
    assert data["findings"] == [
        {
            "group": GROUP,
            "waiting": [0, 1, 2, 4, 5, 6, 7],
            "where": "all_reduce <- train_step train.py:88",
            "elsewhere": [3],
            "message": "ranks 0-2,4-7 wait in all_reduce <- train_step train.py:88; "
            "rank 3 is elsewhere: load_batch data.py:41",
        }
    ]


def test_no_summary_when_all_ranks_agree():
    report = group_stacks("j", [_process(r, ALL_REDUCE) for r in range(4)])
    assert summarize(report) is None and report.ok


def test_processes_without_rank_are_labelled_by_pid():
    report = group_stacks("j", [_process(None, LOAD_BATCH, pid=77)])
    assert report.groups[0].label == "pid 77@host-a"


def test_process_with_no_stack_is_reported_with_the_reason():
    proc = _process(2, ALL_REDUCE)
    failed = ProcessStacks(proc.status, (), "none", "py-spy: permission denied")
    report = group_stacks("j", [failed])
    assert report.groups == ()
    assert report.unanswered[0].rank == 2 and "permission denied" in report.unanswered[0].reason


def test_rendered_text_golden():
    console = Console(width=100, record=True, color_system=None)
    console.print(render_stacks(group_stacks("01000000", _eight_ranks_rank_3_elsewhere())))
    text = console.export_text()
    assert text.splitlines() == [
        "job 01000000: 8 processes, 3 distinct stacks",
        "finding: ranks 0-2,4-7 wait in all_reduce <- train_step train.py:88; rank 3 is elsewhere: "
        "load_batch",
        "data.py:41",
        "",
        "rank 3: load_batch data.py:41   [MainThread]",
        "    load_batch               /job/data.py:41",
        "    train                    /job/train.py:40",
        "    ... 1 library frame",
        "",
        "ranks 0-2,4-7: all_reduce <- train_step train.py:88   [MainThread]",
        "    all_reduce               torch/distributed/distributed_c10d.py:2500",
        "    wrapper                  torch/distributed/c10d_logger.py:83",
        "    train_step               /job/train.py:88",
        "    train                    /job/train.py:40",
        "    ... 1 library frame",
        "ranks 0-7: idle in main_loop worker.py:900   [PythonGCThread]",
    ]


@pytest.mark.parametrize(
    ("spec", "ranks"),
    [("0", {0}), ("0,3-5", {0, 3, 4, 5}), (" 1 , 2 ", {1, 2}), ("4-4", {4})],
)
def test_parse_rank_spec(spec, ranks):
    assert parse_rank_spec(spec) == frozenset(ranks)


@pytest.mark.parametrize("spec", ["", "x", "1-", "-1", "3-1", "1,,2", "1.5"])
def test_bad_rank_specs_raise_a_clear_error(spec):
    with pytest.raises(BadRankSpec, match="--ranks"):
        parse_rank_spec(spec)


@given(st.sets(st.integers(min_value=0, max_value=512), min_size=1))
def test_format_then_parse_round_trips(ranks):
    assert parse_rank_spec(format_ranks(ranks)) == frozenset(ranks)


def test_format_ranks_compresses_runs():
    assert format_ranks([7, 0, 1, 2, 4, 5, 6]) == "0-2,4-7"


def test_a_stragglers_own_place_is_where_it_spends_time_its_peers_do_not():
    from rankscope.stacks.analysis import odd_place
    from rankscope.stacks.model import TimeShares

    def shares(**places: int) -> TimeShares:
        ranked = tuple(sorted(((k.replace("_", " ", 1), v) for k, v in places.items()),
                              key=lambda kv: -kv[1]))  # fmt: skip
        return TimeShares(1.5, sum(places.values()), ranked)

    straggler = shares(compute_221=48, step_225=47, reduce_248=5)
    peer = shares(step_225=50, reduce_248=50)
    odd = odd_place(straggler, [peer, peer])
    assert odd is not None and odd.place == "compute 221"
    assert (round(odd.share, 2), odd.peers_share) == (0.48, 0.0)
    slower = odd_place(shares(step_225=90, reduce_248=10), [peer])  # the same line, slower
    assert slower is not None and (slower.place, slower.peers_share) == ("step 225", 0.5)
    assert odd_place(shares(step_225=55, reduce_248=45), [peer]) is None  # where they all are
    assert odd_place(straggler, []) is None and odd_place(shares(), [peer]) is None


def test_sampling_finds_the_line_a_busy_thread_spends_its_time_on():
    import threading

    from rankscope.runtime.probe import OWN_THREAD_PREFIX
    from rankscope.stacks.worker import sample_places

    found = []
    sampler = threading.Thread(
        target=lambda: found.append(sample_places(0.3, 0.005)), name=OWN_THREAD_PREFIX + "test"
    )
    sampler.start()
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        pass  # the busy line
    sampler.join()
    [shares] = found
    top, count = shares.places[0]
    assert top.startswith("test_sampling_finds_the_line_a_busy_thread_spends_its_time_on ")
    assert top.endswith(f"test_stacks_analysis.py:{_line_of_busy()}")
    assert count / shares.samples > 0.8


def _line_of_busy() -> int:
    import inspect

    lines, first = inspect.getsourcelines(
        test_sampling_finds_the_line_a_busy_thread_spends_its_time_on
    )
    return first + next(i for i, line in enumerate(lines) if "# the busy line" in line) - 1
