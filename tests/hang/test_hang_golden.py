"""`rankscope hang` as the user reads it, on a 100-column terminal: a rank that never came to
the collective its group waits in, and a dead rank beside a rank at level off."""

from __future__ import annotations

from pathlib import Path

from helpers.golden import assert_golden, render_text
from helpers.probes import NOW
from rankscope.hang.analysis import RankEvidence, analyze_hang
from rankscope.hang.model import CallState, CollectiveRecord
from rankscope.hang.render import render_hang

GOLDEN = Path(__file__).parent / "golden"
TP = {"0": (0, 1, 2, 3), "1": (0, 1), "2": (2, 3)}
"""A data-parallel group of 4 ranks and two tensor-parallel pairs."""


def _call(seq: int, *, group: str = "0", waiting_s: float | None = None) -> CollectiveRecord:
    """Collective #`seq`: completed 60 s ago, or still waiting after `waiting_s`."""
    start = NOW - 60.0 if waiting_s is None else NOW - waiting_s
    end = None if waiting_s is not None else start + 0.1
    state = CallState.COMPLETED if waiting_s is None else CallState.STARTED
    return CollectiveRecord(
        group, seq, "all_reduce", ((1048576,),), ("float32",), start, end, state, "train.py:88"
    )


def test_a_rank_that_never_came_reads_as_the_golden_text():
    waiting = (_call(1042), _call(1043, waiting_s=12.4), _call(17, group="1"))
    evidence = [RankEvidence(r, waiting, TP) for r in (0, 1, 2)]
    late = (_call(1042), _call(17, group="2"))
    evidence.append(RankEvidence(3, late, TP, where="load_batch data.py:41"))
    report = analyze_hang("01000000", evidence, NOW)
    assert_golden(render_text(render_hang(report)), GOLDEN / "hang_never_came.txt")


def test_a_dead_rank_and_a_rank_at_level_off_read_as_the_golden_text():
    groups = {"0": (0, 1, 2, 3)}
    evidence = [
        RankEvidence(0, (_call(9),), groups),
        RankEvidence(
            1,
            (_call(9),),
            groups,
            where="forward model.py:12",
            dead=True,
            death="Ray: worker died (SYSTEM_ERROR)",
            last_seen=NOW - 4,
        ),
        RankEvidence(2, (_call(8),), groups, paused=True),
    ]
    report = analyze_hang("01000000", evidence, NOW)
    assert_golden(render_text(render_hang(report)), GOLDEN / "hang_dead_and_paused.txt")
