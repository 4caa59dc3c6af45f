"""Stack grouping, rank specs and rendering on synthetic per-rank data (no Ray)."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from rankscope.context import RankContext
from rankscope.errors import BadRankSpec
from rankscope.ranks import format_ranks, parse_rank_spec
from rankscope.runtime.protocol import ProbeInfo, ProbeState, ProbeStatus, Progress
from rankscope.stacks.analysis import group_stacks, summarize
from rankscope.stacks.model import Frame, ProcessStacks, ThreadStack
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


def _process(rank: int | None, frames: list[Frame], pid: int | None = None) -> ProcessStacks:
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
    )
    status = ProbeStatus(
        ProbeInfo(f"p{pid}", ctx, "0.1.0", 0.0),
        ProbeState.ALIVE,
        0.0,
        time.time(),
        Progress(3, time.time()),
        0,
        0,
    )
    threads = (
        ThreadStack("MainThread", 1, True, tuple(frames)),
        ThreadStack("PythonGCThread", 2, False, (RAY_LOOP,)),
    )
    return ProcessStacks(status, threads, "probe")


def _eight_ranks_rank_3_elsewhere():
    return [_process(r, LOAD_BATCH if r == 3 else ALL_REDUCE) for r in range(8)]


def test_identical_stacks_group_and_the_odd_one_comes_first():
    report = group_stacks("01000000", _eight_ranks_rank_3_elsewhere())

    busy = [g for g in report.groups if not g.idle]
    assert [(g.label, g.headline) for g in busy] == [
        ("rank 3", "load_batch data.py:41"),
        ("ranks 0-2,4-7", "all_reduce <- train_step train.py:88"),
    ]
    assert report.groups[-1].idle and report.groups[-1].label == "ranks 0-7"


def test_summary_names_the_outlier():
    report = group_stacks("01000000", _eight_ranks_rank_3_elsewhere())
    assert summarize(report) == (
        "ranks 0-2,4-7 wait in all_reduce <- train_step train.py:88; "
        "rank 3 is elsewhere: load_batch data.py:41"
    )


def test_no_summary_when_all_ranks_agree():
    report = group_stacks("j", [_process(r, ALL_REDUCE) for r in range(4)])
    assert summarize(report) is None


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
