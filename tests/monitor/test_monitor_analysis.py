"""Monitor analysis on synthetic per-rank data (no Ray)."""

from __future__ import annotations

import math
import pickle
import random

import pytest

from rankscope.hang.model import CallState, CollectiveRecord
from rankscope.monitor import analysis
from rankscope.monitor.model import (
    FindingKind,
    MemoryUse,
    NonFinite,
    RankSeries,
    StepSample,
    Thresholds,
)
from rankscope.monitor.straggler import straggler_scores
from rankscope.monitor.worker import StepRecorder

T = Thresholds()


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


# ----------------------------------------------------------------- the series detectors


def _samples(step_s, loss=None, tokens=None) -> list[StepSample]:
    out, t = [], 1000.0
    for i, dt in enumerate(step_s):
        t += dt
        out.append(
            StepSample(
                i + 1,
                t,
                None if loss is None else loss[i],
                None if tokens is None else tokens,
            )
        )
    return out


def _decreasing_loss(n: int, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [3.0 * math.exp(-i / 60) + 0.5 + rng.gauss(0, 0.01) for i in range(n)]


def test_throughput_drop_of_30_percent_is_found_at_its_step() -> None:
    rng = random.Random(1)
    step_s = [0.1 * (1 + rng.uniform(-0.03, 0.03)) for _ in range(100)]
    step_s = [s if i + 1 < 50 else s / 0.7 for i, s in enumerate(step_s)]
    found = analysis.throughput_drift(_samples(step_s, tokens=4096), rank=3)
    assert found is not None and found.kind is FindingKind.THROUGHPUT_DRIFT
    assert found.step == 50 and found.ranks == (3,)
    assert "tokens/s dropped 30% at step 50" in found.evidence


def test_fewer_tokens_a_step_is_found_at_that_step_despite_noisy_step_times() -> None:
    rng = random.Random(3)
    samples, t = [], 1000.0
    for i in range(1, 101):
        t += 0.045 * (1 + rng.uniform(-0.25, 0.25))
        samples.append(StepSample(i, t, 1.0, 512 if i < 50 else 358))
    found = analysis.throughput_drift(samples, rank=0)
    assert found is not None and found.step == 50
    assert "tokens per step 512 -> 358" in found.evidence


def test_steady_noisy_throughput_is_no_finding() -> None:
    rng = random.Random(2)
    step_s = [0.1 * (1 + rng.uniform(-0.05, 0.05)) for _ in range(200)]
    assert analysis.throughput_drift(_samples(step_s)) is None


def test_loss_spike_at_step_30_is_found_and_a_smooth_noisy_loss_is_not() -> None:
    loss = _decreasing_loss(120)
    assert analysis.rank_findings(_samples([0.1] * 120, loss), T) == []
    loss[29] *= 10
    found = analysis.loss_spikes(_samples([0.1] * 120, loss), T, rank=0)
    assert found is not None and found.step == 30
    assert "at step 30" in found.evidence


def test_oscillating_loss_is_found() -> None:
    loss = [2.0 + 0.6 * math.sin(i / 3) + 0.01 * (i % 2) for i in range(100)]
    found = analysis.oscillation(_samples([0.1] * 100, loss), T, rank=1)
    assert found is not None and found.kind is FindingKind.LOSS_OSCILLATION
    assert found.value >= T.oscillation_swings


def test_divergence_is_a_loss_rising_well_above_its_best() -> None:
    loss = [2.0 - i * 0.01 for i in range(50)] + [1.5 + i * 0.05 for i in range(50)]
    found = analysis.divergence(_samples([0.1] * 100, loss), T, rank=0)
    assert found is not None and found.kind is FindingKind.LOSS_DIVERGENCE
    assert analysis.divergence(_samples([0.1] * 100, _decreasing_loss(100)), T) is None


def _series(rank: int, samples, **kw) -> RankSeries:
    return RankSeries(rank=rank, group="g", node="n", role="", samples=tuple(samples), **kw)


def test_first_nonfinite_names_the_earliest_rank_and_step() -> None:
    series = [
        _series(0, [], first_nonfinite=NonFinite(14, 1003.0, "loss", "nan")),
        _series(1, [], first_nonfinite=NonFinite(12, 1001.0, "grad_norm", "nan")),
        _series(2, []),
    ]
    found = analysis.first_nonfinite(series)
    assert found is not None and found.ranks == (1,) and found.step == 12
    assert "rank 1 saw the first nan grad_norm at step 12; later also ranks 0" in found.evidence


def test_memory_over_thresholds() -> None:
    gib = 1 << 30
    found = analysis.memory_findings(2, MemoryUse(70 * gib, 80 * gib, 10 * gib, 100 * gib), T)
    assert [f.kind for f in found] == [FindingKind.DEVICE_MEMORY]
    assert "88% > 85%" in found[0].evidence


def _sync_job(compute: dict[int, float], steps: int, late: dict[int, float] | None = None):
    """Synchronous training: one all_reduce a step that ends when the last rank arrives."""
    late = late or {}
    samples: dict[int, list[StepSample]] = {r: [] for r in compute}
    records: dict[int, list[CollectiveRecord]] = {r: [] for r in compute}
    t = 1000.0
    for k in range(steps):
        arrive = {r: t + c + (late.get(r, 0.0) if k == 10 else 0.0) for r, c in compute.items()}
        done = max(arrive.values()) + 0.001
        for r in compute:
            records[r].append(
                CollectiveRecord(
                    "0", k, "all_reduce", ((4,),), ("float32",), arrive[r], done,
                    CallState.COMPLETED, "train.py:1",
                )
            )  # fmt: skip
            samples[r].append(StepSample(k + 1, done + 0.0005))
        t = done + 0.0005
    return [_series(r, samples[r], collectives=tuple(records[r])) for r in compute]


def test_analyze_names_the_straggler_that_arrives_last() -> None:
    series = _sync_job({0: 0.010, 1: 0.011, 2: 0.050, 3: 0.010}, 40)
    scores = analysis.stragglers(series)
    assert scores[0].rank == 2 and scores[0].is_straggler
    assert scores[0].last_arrival_share == 1.0 and scores[0].relative > 3
    found = analysis.analyze(series)
    kinds = {(f.kind, f.ranks) for f in found}
    assert (FindingKind.STRAGGLER, (2,)) in kinds
    assert not any(f.kind is FindingKind.STRAGGLER and f.ranks != (2,) for f in found)


def test_ranks_that_never_mark_steps_are_scored_from_their_collectives() -> None:
    # verl's workers or a Ray Train loop left unchanged: the recorder's collectives, no steps
    stepped = _sync_job({0: 0.030, 1: 0.031, 2: 0.080, 3: 0.030}, 40)
    series = [_series(s.rank, [], collectives=s.collectives) for s in stepped]
    scores = analysis.stragglers(series)
    assert scores[0].rank == 2 and scores[0].is_straggler and scores[0].relative > 2
    assert "over the window" in scores[0].why
    assert not any(s.is_straggler for s in scores[1:])
    found = [f for f in analysis.analyze(series) if f.kind is FindingKind.STRAGGLER]
    assert [f.ranks for f in found] == [(2,)]


def test_step_histories_with_different_strides_compare_per_step() -> None:
    # a run directory's step files keep one point per stride steps; a rank that died early has
    # a finer stride than those that ran on, at the same speed (0.1 s a step)
    def history(stride: int, last: int) -> list[StepSample]:
        return [
            StepSample(k, 1000.0 + 0.1 * k, 1.0, 512.0 * stride) for k in range(0, last, stride)
        ]

    series = [_series(0, history(2, 200)), _series(1, history(2, 200)), _series(2, history(8, 600))]
    assert not any(s.is_straggler for s in analysis.stragglers(series))
    _, rates, unit, tokens, seconds = analysis._rate_parts(history(8, 600))
    assert abs(rates[0] - 5120.0) < 1e-6  # 512 tokens a step, 10 steps a second
    assert unit == "tokens/s" and tokens[0] == 512.0 and abs(seconds[0] - 0.1) < 1e-9


def test_the_live_judge_scores_unstepped_ranks_from_the_collectives_heartbeats_carry() -> None:
    from rankscope.monitor.alert_rules import group_findings
    from rankscope.monitor.view import RankInput

    # each heartbeat carries a rank's last 16 records; the ranks' windows overlap partly
    stepped = _sync_job({0: 0.030, 1: 0.031, 2: 0.080, 3: 0.030}, 40)
    last = {0: 30, 1: 34, 2: 36, 3: 40}  # where each rank's last heartbeat cut its records
    inputs = [
        RankInput(s.rank, "g", "n", "Worker", s.rank, "alive", None,
                  s.collectives[last[s.rank] - 16 : last[s.rank]])
        for s in stepped
    ]  # fmt: skip
    found = [f for f in group_findings(inputs, T) if f.kind is FindingKind.STRAGGLER]
    assert [f.ranks for f in found] == [(2,)] and "over the window" in found[0].evidence


def test_a_collective_entered_100ms_late_once_is_no_finding() -> None:
    # one sample is not a finding (`test_monitor_persistence.py` has the persistent ones)
    series = _sync_job({0: 0.010, 1: 0.010}, 30, late={1: 0.1})
    assert not [f for f in analysis.analyze(series) if f.kind is FindingKind.COLLECTIVE_LATENCY]


def test_recorder_is_bounded_and_keeps_the_first_nonfinite() -> None:
    torch = pytest.importorskip("torch")
    rec = StepRecorder(capacity=8)
    for i in range(1, 21):
        grad = float("nan") if i in (12, 15) else 1.0
        rec.on_step(i, 1000.0 + i, torch.tensor(2.0), 128, grad, {})
    assert len(rec.samples()) == 8 and rec.samples()[-1].loss == 2.0
    assert rec.first_nonfinite is not None
    assert (rec.first_nonfinite.step, rec.first_nonfinite.name) == (12, "grad_norm")
    rec.on_step(21, 1021.0, None, None, None, {"lr": float("inf")})
    assert rec.first_nonfinite.step == 12


def test_thresholds_validate() -> None:
    with pytest.raises(ValueError, match="device_memory"):
        Thresholds(device_memory=1.5)
    assert len(pickle.dumps(T)) < 1000


def test_watch_nan_names_the_module_and_the_step_without_ray() -> None:
    torch = pytest.importorskip("torch")
    from torch import nn

    import rankscope
    from rankscope.monitor import StepMonitor, watch_nan
    from rankscope.monitor.worker import step_recorder

    class Poison(nn.Module):
        on = False

        def forward(self, x):
            return x * float("nan") if self.on else x

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), Poison(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step_recorder().clear()
    watch = watch_nan(model, opt)
    try:
        start = rankscope.runtime.probe.progress.step
        for i in range(1, 16):
            model[2].on = i == 12
            opt.zero_grad()
            x = torch.randn(4, 8)
            loss = nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
            loss.backward()
            opt.step()
            rankscope.step(loss=loss.detach(), tokens=32)
        first = step_recorder().first_nonfinite
        assert first is not None and first.step - start == 12
        assert (first.name, first.module) == ("activation", "2")
        assert watch.found == "activation in 2 (output)"
        found = StepMonitor().check()
        assert any(
            f.kind is FindingKind.NON_FINITE and "in 2 (output)" in f.evidence for f in found
        )
    finally:
        watch.remove()
        step_recorder().clear()


def test_watch_nan_names_a_gradient_and_leaves_the_model_as_it_was() -> None:
    torch = pytest.importorskip("torch")
    import copy

    from torch import nn

    from rankscope.monitor import watch_nan

    class InfGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # type: ignore[no-untyped-def]
            return x.clone()

        @staticmethod
        def backward(ctx, g):  # type: ignore[no-untyped-def]
            return g * float("inf")

    class Layer(nn.Module):
        on = False

        def forward(self, x):  # type: ignore[no-untyped-def]
            return InfGrad.apply(x) if self.on else x

    model = nn.Sequential(nn.Linear(4, 4), Layer(), nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    watch = watch_nan(model, opt)
    try:
        copy.deepcopy(model)(torch.ones(2, 4))  # a copy or a pickle works, unwatched
        pickle.loads(pickle.dumps(model[0]))(torch.ones(2, 4))
        assert watch.sums == []
        for on in (False, True):
            model[1].on = on
            opt.zero_grad()
            model(torch.ones(2, 4)).sum().backward()
            opt.step()
        # finite outputs; backward reaches layer 0 after the bad one: its gradient is first
        assert watch.found == "gradient in 0 (0.bias)"
    finally:
        watch.remove()
    assert all("forward" not in m.__dict__ for m in model)
    from rankscope.monitor.worker_nan import _check_at_step

    model = nn.Sequential(nn.Linear(4, 4), Layer(), nn.Linear(4, 1))  # weights still finite
    model[1].on = True
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    watch = watch_nan(model, opt)
    try:  # AMP's scaler skips the optimizer's step on inf gradients: that is not a fault
        opt.zero_grad()
        model(torch.ones(2, 4)).sum().backward()
        _check_at_step()  # rankscope.step() with no optimizer step since the forward
        assert watch.found == ""
    finally:
        watch.remove()


def test_comm_bench_numbers_follow_nccl_tests() -> None:
    from rankscope.monitor.comm import PairLink, bus_bandwidth, message_sizes, slow_pairs

    assert bus_bandwidth("all_reduce", 1_000_000_000, 1.0, 4) == (1.0, 1.5)
    assert bus_bandwidth("all_gather", 1_000_000_000, 0.5, 4) == (2.0, 1.5)
    sizes = message_sizes()
    assert sizes[0] == 1024 and sizes[-1] == 256 << 20 and len(sizes) == 10
    pairs = [PairLink("a", "b", 1e-4, 10.0), PairLink("a", "c", 1e-4, 10.0)]
    assert slow_pairs([*pairs, PairLink("b", "c", 0.0001, 10.0)]) == []
    slow = slow_pairs([*pairs, PairLink("b", "c", 0.0001, 3.0)])
    assert slow == ["b <-> c: 3.00 GB/s, 3.3x slower than the median pair"]


def test_heartbeat_summary_stays_small() -> None:
    from rankscope.monitor import worker

    rec = worker.step_recorder()
    rec.clear()
    try:
        loss = [1.0] * 150 + [50.0] + [1.0] * 49  # a spike: an alert line
        for i, value in enumerate(loss, 1):
            rec.on_step(i, 1000.0 + i * (0.1 if i < 100 else 0.2), value, 512, float("nan"), {})
        rec.alerts_at = 0.0
        summary = worker.summary()
        assert summary is not None and summary.step == 200
        assert summary.alerts and len(summary.alerts) <= worker.MAX_ALERTS
        assert any("grad_norm" in a for a in summary.alerts)
        assert len(pickle.dumps(summary)) < 2048
    finally:
        rec.clear()
