"""`rankscope stacks` as the user reads it, on a 100-column terminal: a hung 8-rank job (one
rank elsewhere, one whose stacks could not be taken, an idle driver-side actor)."""

from __future__ import annotations

from pathlib import Path

from helpers.golden import assert_golden, render_text
from helpers.probes import NOW, probe_status
from rankscope.stacks.analysis import group_stacks
from rankscope.stacks.model import Frame, ProcessStacks, ThreadStack
from rankscope.stacks.render import render_stacks

GOLDEN = Path(__file__).parent / "golden"
LIB = "/venv/lib/python3.11/site-packages/"
RAY_LOOP = Frame("main_loop", LIB + "ray/_private/worker.py", 900, True)
ALL_REDUCE = (
    Frame("all_reduce", LIB + "torch/distributed/distributed_c10d.py", 2500, True),
    Frame("wrapper", LIB + "torch/distributed/c10d_logger.py", 83, True),
    Frame("train_step", "/job/train.py", 88, False),
    Frame("train", "/job/train.py", 40, False),
    RAY_LOOP,
)
LOAD_BATCH = (Frame("load_batch", "/job/data.py", 41, False), *ALL_REDUCE[3:])


def _answered(
    rank: int | None,
    frames: tuple[Frame, ...],
    *,
    stepped_ago: float = 0.5,
    node: int = 0,
    actor: str = "Worker",
) -> ProcessStacks:
    status = probe_status(rank, world_size=8, stepped_ago=stepped_ago, node=node, actor=actor)
    threads = (
        ThreadStack("MainThread", 1, True, frames),
        ThreadStack("PythonGCThread", 2, False, (RAY_LOOP,)),
    )
    return ProcessStacks(status, threads, "probe")


def _hung_job() -> list[ProcessStacks]:
    """Ranks 0-2 and 4-6 in all_reduce, rank 3 loading data (none stepped for 30 s), rank 7's
    stacks out of reach, and a controller without a rank idle in Ray's task loop."""
    processes = [
        _answered(r, LOAD_BATCH if r == 3 else ALL_REDUCE, stepped_ago=30.0, node=r // 4)
        for r in range(7)
    ]
    lost = probe_status(7, world_size=8, node=1)
    processes.append(
        ProcessStacks(lost, (), "none", "probe did not answer within 2s; py-spy: permission denied")
    )
    processes.append(_answered(None, (RAY_LOOP,), actor="TrainController"))
    return processes


def test_a_hung_jobs_stacks_read_as_the_golden_text():
    report = group_stacks("01000000", _hung_job(), now=NOW)
    assert_golden(render_text(render_stacks(report)), GOLDEN / "stacks_hung.txt")


def test_every_frame_and_every_group_read_as_the_golden_text():
    report = group_stacks("01000000", _hung_job(), now=NOW)
    text = render_text(render_stacks(report, all_frames=True, show_all=True))
    assert_golden(text, GOLDEN / "stacks_all_frames.txt")
