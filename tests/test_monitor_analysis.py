"""Monitor analysis on synthetic per-rank data (no Ray)."""

from __future__ import annotations

import random

import pytest

from rankscope.monitor.straggler import straggler_scores


def _noisy(base: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [base * (1 + rng.uniform(-0.03, 0.03)) for _ in range(n)]


def test_straggler_is_the_rank_that_computes_longer_not_the_one_that_waits() -> None:
    # Synchronous: every rank's step is 45 ms; ranks 0, 1, 3 wait 40 ms for rank 2.
    steps = {r: _noisy(0.045, 50, r) for r in range(4)}
    waits = {r: [0.040] * 50 for r in (0, 1, 3)} | {2: [0.0] * 50}
    scores = straggler_scores(steps, waits, {2: 48, 0: 1, 1: 1}, 50)
    worst = scores[0]
    assert worst.rank == 2 and worst.is_straggler
    assert worst.relative > 5
    assert worst.last_arrival_share == pytest.approx(0.96)
    assert "rank 2 computes" in worst.why and "last to arrive at 48 of 50" in worst.why
    assert [s.rank for s in scores if s.is_straggler] == [2]
    assert all(s.relative < 1.2 for s in scores[1:])


def test_same_step_times_without_waits_name_nobody() -> None:
    steps = {r: _noisy(0.1, 30, r) for r in range(8)}
    scores = straggler_scores(steps, None, {r: 4 for r in range(8)}, 32)
    assert not any(s.is_straggler for s in scores)
    assert all(0.9 < s.relative < 1.1 for s in scores)


def test_individual_score_sees_a_rank_that_slowed_down() -> None:
    steps = {0: _noisy(0.1, 40, 0), 1: _noisy(0.1, 30, 1) + _noisy(0.15, 10, 2)}
    by_rank = {s.rank: s for s in straggler_scores(steps, recent=10)}
    assert by_rank[1].individual == pytest.approx(1.5, rel=0.08)
    assert by_rank[1].is_straggler and "its own best" in by_rank[1].why
    assert by_rank[0].individual < 1.1


def test_last_arrival_alone_names_a_rank_and_chance_does_not() -> None:
    steps = {r: [0.1] * 10 for r in range(2)}
    assert not any(s.is_straggler for s in straggler_scores(steps, None, {0: 6, 1: 4}, 10))
    scores = straggler_scores(steps, None, {0: 1, 1: 19}, 20)
    assert scores[0].rank == 1 and scores[0].is_straggler
    assert "last to arrive" in scores[0].why


def test_partial_data_and_bad_threshold() -> None:
    assert straggler_scores({}) == []
    assert straggler_scores({0: [], 1: [0.1]})[0].rank == 1
    # wait series longer or shorter than the steps: aligned from the end, never negative.
    s = straggler_scores({0: [0.1, 0.1, 0.1]}, {0: [0.5, 0.2]})[0]
    assert s.compute_s >= 0
    with pytest.raises(ValueError, match="threshold"):
        straggler_scores({0: [0.1]}, threshold=1.0)
