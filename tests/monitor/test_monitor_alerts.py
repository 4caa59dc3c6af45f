"""The monitor's findings as alerts, the phase that makes a straggler slow, and level `off` on
the monitor's worker side: synthetic data and this process only (no Ray)."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import pytest

import rankscope
from helpers.cluster import webhook_server
from rankscope import level
from rankscope.alerts.analysis import alerts_from_events
from rankscope.alerts.model import Alert
from rankscope.hang.model import CallState, CollectiveRecord
from rankscope.monitor import analysis
from rankscope.monitor.alert_rules import AlertGate, finding_alerts, group_findings
from rankscope.monitor.collectives import align, latency_findings
from rankscope.monitor.model import (
    Finding,
    FindingKind,
    MemoryUse,
    MonitorSummary,
    NonFinite,
    RankSeries,
    StepSample,
    Thresholds,
)
from rankscope.monitor.phases import PhaseTime, per_step, phase_of, phase_window, slow_phase
from rankscope.monitor.view import RankInput
from rankscope.monitor.worker import step_recorder, summary
from rankscope.monitor.worker_tap import SpanTap

T = Thresholds()


def _finding(kind: FindingKind, rank: int, step: int | None = None) -> Finding:
    return Finding(kind, (rank,), step, f"rank {rank} {kind.value} evidence", "do", group="g")


def test_alerted_findings_become_alerts_naming_the_rank() -> None:
    found = [
        _finding(FindingKind.NON_FINITE, 1, 12),
        _finding(FindingKind.STRAGGLER, 2),
        _finding(FindingKind.LOSS_DIVERGENCE, 0),
        _finding(FindingKind.LOSS_DISAGREEMENT, 3),
        _finding(FindingKind.THROUGHPUT_DRIFT, 0),  # not a drop (value 0): stays in `monitor`
        _finding(FindingKind.HOST_MEMORY, 0),  # the alerts feature has its own memory rule
    ]
    alerts = finding_alerts(found, 100.0, "job")
    assert [(a.rule, a.severity, a.rank) for a in alerts] == [
        ("non_finite", "critical", 1),
        ("straggler", "warning", 2),
        ("loss_divergence", "error", 0),
        ("loss_disagreement", "error", 3),
    ]
    assert all(a.message.startswith(f"rank {a.rank} ") and a.group == "g" for a in alerts)


def test_gate_raises_new_holds_repeats_resolves_what_stopped() -> None:
    gate = AlertGate(cooldown_s=60.0)
    slow = Alert("straggler", "warning", "rank 2 slow", 0.0, rank=2)
    nan = Alert("non_finite", "critical", "rank 1 nan", 0.0, rank=1)
    raised, resolved = gate.update([slow, nan], 100.0, [None, 12])
    assert [a.rule for a in raised] == ["straggler", "non_finite"] and not resolved
    assert gate.update([slow, nan], 130.0, [None, 12]) == ([], [])  # within the cooldown
    raised, _ = gate.update([slow, nan], 170.0, [None, 12])  # it fired 3 times; nan only once
    assert [(a.rule, a.count, a.time) for a in raised] == [("straggler", 3, 170.0)]
    raised, resolved = gate.update([], 180.0)
    assert raised == [] and resolved == [("straggler", 2)]  # the non-finite is never "resolved"
    raised, _ = gate.update([nan], 190.0, [12])
    assert raised == []  # the same first non-finite is not raised again


def _input(rank: int, step_s: float, wait_s: float, loss: float | None = 1.0) -> RankInput:
    s = MonitorSummary(80, step_s, 1000.0, loss, 1.0, wait_s, MemoryUse(), loss_level=loss)
    return RankInput(rank, "g", "node", "Worker", 100 + rank, "alive", s)


def test_group_rules_name_the_straggler_and_the_disagreeing_rank_from_summaries() -> None:
    # Synchronous steps of 50 ms: ranks 0, 1, 3 wait 40 ms for rank 2; rank 3's loss is off.
    inputs = [_input(0, 0.05, 0.04), _input(1, 0.05, 0.04), _input(2, 0.05, 0.0)]
    inputs.append(_input(3, 0.05, 0.04, loss=2.0))
    found = group_findings(inputs, T)
    by_kind = {f.kind: f for f in found}
    assert set(by_kind) == {FindingKind.STRAGGLER, FindingKind.LOSS_DISAGREEMENT}
    assert by_kind[FindingKind.STRAGGLER].ranks == (2,)
    assert by_kind[FindingKind.STRAGGLER].evidence.startswith("rank 2 computes 5.00x")
    assert by_kind[FindingKind.LOSS_DISAGREEMENT].ranks == (3,)
    healthy = [_input(r, 0.05, 0.01) for r in range(4)]
    assert group_findings(healthy, T) == []
    dead = [*healthy[:3], RankInput(3, "g", "n", "W", 9, "dead", inputs[2].summary)]
    assert group_findings(dead, T) == []  # a dead rank's last summary judges nobody


def test_events_of_one_judge_about_two_ranks_stay_two_alerts_resolved_by_rank() -> None:
    def event(kind: str, rank: int, t: float) -> dict:
        payload = {"rule": "straggler", "severity": "warning", "message": f"rank {rank}"}
        return {"kind": kind, "time": t, "probe_id": "judge", "payload": {**payload, "rank": rank}}

    events = [event("alert", 2, 10.0), event("alert", 3, 11.0), event("alert_resolved", 2, 12.0)]
    alerts = alerts_from_events(events, now=20.0, active_for_s=300.0)
    assert [(a.rank, a.active) for a in alerts] == [(3, True), (2, False)]


def test_publish_posts_the_alert_about_its_rank_to_the_webhook() -> None:
    from rankscope.alerts.api import configure_alerts
    from rankscope.alerts.worker import publish

    with webhook_server() as (url, received):
        configure_alerts(webhook=url)
        try:
            publish([Alert("straggler", "warning", "rank 3 computes 2.10x", time.time(), rank=3)])
            deadline = time.time() + 10
            while not received and time.time() < deadline:
                time.sleep(0.05)
        finally:
            configure_alerts(webhook="")
    (body,) = received
    assert body["rule"] == "straggler" and body["rank"] == 3
    assert "rank 3 computes" in body["text"]


def _samples(tokens_from_50: int, steps: int = 100) -> list[StepSample]:
    """A rank stepping every 100 ms with 512 tokens a step, then `tokens_from_50`."""
    return [
        StepSample(k, 1000.0 + 0.1 * k, tokens=512 if k < 50 else tokens_from_50)
        for k in range(1, steps + 1)
    ]


def test_a_throughput_drop_is_an_alert_with_its_step_a_rise_is_not() -> None:
    drop = analysis.throughput_drift(_samples(358), T.throughput_drift, rank=0)
    rise = analysis.throughput_drift(_samples(700), T.throughput_drift, rank=1)
    assert drop is not None and rise is not None and drop.step == 50 == rise.step
    (alert,) = finding_alerts([drop, rise], 5.0, "job")
    assert (alert.rule, alert.severity, alert.rank) == ("throughput_drift", "warning", 0)
    assert alert.message.startswith("rank 0 tokens/s dropped 30% at step 50 ")
    assert "tokens per step 512 -> 358" in alert.message


def test_raise_local_posts_a_throughput_drop_through_publish() -> None:
    from rankscope.alerts.api import configure_alerts
    from rankscope.monitor import worker_alerts

    drop = analysis.throughput_drift(_samples(358), T.throughput_drift, rank=7)
    rise = analysis.throughput_drift(_samples(700), T.throughput_drift, rank=8)
    with webhook_server() as (url, received):
        configure_alerts(webhook=url)
        try:
            worker_alerts.raise_local([f for f in (drop, rise) if f is not None])
            deadline = time.time() + 10
            while not received and time.time() < deadline:
                time.sleep(0.05)
        finally:
            configure_alerts(webhook="")
            worker_alerts.raise_local([])  # resolved: the gate forgets it
    assert [(b["rule"], b["rank"]) for b in received] == [("throughput_drift", 7)]
    assert "dropped 30% at step 50" in received[0]["text"]


def _with_collectives(late_s: float, ranks: int = 3, late_from: int = 10) -> list[RankInput]:
    """Heartbeat summaries of a synchronous group: 16 all_reduces each (what the hang summary
    carries), rank 1 entering #10 (`late_from` to #15) `late_s` after the others."""
    lagged = [k == 10 or (late_from < 10 and late_from <= k) for k in range(16)]
    out = []
    for r in range(ranks):
        recs = []
        for k in range(16):
            lag = late_s if lagged[k] else 0.0
            t = 1000.0 + 0.02 * k + late_s * sum(lagged[:k])
            start = t + (lag if r == 1 else 0.0)
            end = t + lag + 0.001
            recs.append(
                CollectiveRecord(
                    "0", k, "all_reduce", ((4,),), ("float32",), start, end,
                    CallState.COMPLETED, "train.py:1",
                )
            )  # fmt: skip
        base = _input(r, 0.02, 0.001)
        out.append(replace(base, collectives=tuple(recs)))
    return out


def test_the_judge_alerts_a_rank_late_at_most_collectives_from_the_heartbeats() -> None:
    assert group_findings(_with_collectives(0.1), T) == []  # late once: a sample, no alert
    assert group_findings(_with_collectives(0.0), T) == []  # on time: nothing
    # late at #2 to #15: its compute is no longer than the others', it arrives last every time
    (found,) = group_findings(_with_collectives(0.1, late_from=2), T)
    assert (found.kind, found.ranks) == (FindingKind.STRAGGLER, (1,))
    assert "last to arrive at 14 of 14 collectives" in found.evidence
    (alert,) = finding_alerts([found], 5.0, "job")
    assert (alert.rule, alert.severity, alert.rank) == ("straggler", "warning", 1)
    # the late-arrival rule itself (alone it names an episode of a longer run, where the
    # rank's share over the whole window stays under the straggler's)
    episode = _with_collectives(0.1, late_from=2)
    late = latency_findings(align({i.rank: i.collectives for i in episode}), "g", T, 0.02)
    (alert,) = finding_alerts(late, 5.0, "job")
    assert (alert.rule, alert.severity, alert.rank) == ("collective_latency", "warning", 1)
    assert alert.message == (
        "g/pg 0: rank 1 entered 14 of 14 collectives last (#2 to #15), 100 ms after the first "
        "rank at the median (limit 50 ms), up to 100 ms at all_reduce #2; ranks 0,2 waited for it"
    )


# --------------------------------------------------------------------- the straggler's phase


def test_span_names_map_to_phases() -> None:
    assert phase_of("load_batch") == phase_of("DataLoader.next") == "data loading"
    assert phase_of("forward") == "forward" and phase_of("loss.backward") == "backward"
    assert phase_of("optimizer.step") == "optimizer"
    assert phase_of("train_step") == "train_step"


def test_phase_windows_count_overlaps_once_and_scale_to_the_step() -> None:
    s = 1_000_000_000
    spans = [("load_batch", -s, 2 * s), ("read_shard", s, 3 * s), ("forward", 3 * s, 5 * s)]
    window = phase_window(spans, 0, 4 * s)  # clipped to the window: forward 3-4 s
    assert dict(window.seconds) == {"data loading": 3.0, "forward": 1.0}
    # a second window after a gap (a drain the tap did not see): shares of the covered time
    other = phase_window([("forward", 10 * s, 12 * s)], 10 * s, 12 * s)
    times = {p.phase: p.seconds for p in per_step([window, other], step_s=2.0)}
    assert times == {"data loading": 1.0, "forward": 1.0}
    assert per_step([], 1.0) == () and per_step([window], 0.0) == ()


def _phases(data: float, compute: float, wrap: bool = False) -> tuple[PhaseTime, ...]:
    parts = [
        PhaseTime("data loading", data, ("load_batch",)),
        PhaseTime("forward", compute / 2),
        PhaseTime("backward", compute / 2),
    ]
    if wrap:  # a span around the whole step
        parts.append(PhaseTime("train_step", data + compute))
    return tuple(parts)


def test_slow_phase_says_data_loading_not_compute() -> None:
    phases = {r: _phases(0.2, 0.3, wrap=True) for r in (0, 1, 2)} | {3: _phases(1.8, 0.3, True)}
    slow = slow_phase(3, phases)
    assert slow is not None and slow.phase == "data loading"
    assert slow.text(2.1) == (
        "rank 3 is 2.1x slower: data loading (load_batch) 1.80 s vs median 200 ms a step "
        "(compute 300 ms vs 300 ms)"
    )
    compute = {r: _phases(0.2, 0.3) for r in (0, 1, 2)} | {3: _phases(0.2, 0.9)}
    slow = slow_phase(3, compute)
    assert slow is not None and slow.phase in ("forward", "backward")
    assert slow_phase(0, compute) is None  # rank 0 is the median
    assert slow_phase(3, {3: _phases(1.8, 0.3)}) is None  # nobody to compare with


def test_monitor_straggler_finding_names_the_phase_when_spans_exist() -> None:
    def series(rank: int, step_s: float, data_s: float) -> RankSeries:
        samples = tuple(StepSample(i, i * step_s, 1.0) for i in range(40))
        return RankSeries(rank, "g", "n", "W", samples, phases=_phases(data_s, 0.02))

    job = [series(0, 0.03, 0.005), series(1, 0.03, 0.005), series(2, 0.09, 0.065)]
    (straggler,) = [f for f in analysis.analyze(job, T) if f.kind == FindingKind.STRAGGLER]
    assert straggler.ranks == (2,)
    assert straggler.evidence.startswith(
        "rank 2 is 3.0x slower: data loading (load_batch) 65 ms vs median 5 ms a step"
    )
    assert "rank 2 computes 3.00x the group median" in straggler.evidence


def test_span_tap_keeps_the_training_threads_phases_across_drains() -> None:
    import threading

    from rankscope.trace import worker_spans

    tap = SpanTap()
    tap.poll()
    assert not tap.windows  # tracing off: nothing
    samples = [StepSample(0, time.time())]

    def steps(n: int) -> None:
        for _ in range(n):
            with rankscope.span("load_batch"):
                time.sleep(0.02)
            with rankscope.span("forward"):
                time.sleep(0.005)
            samples.append(StepSample(len(samples), time.time()))

    ring = worker_spans.start_recording(1000)
    try:
        other = threading.Thread(target=lambda: rankscope.span("load_batch")(time.sleep)(0.1))
        other.start()  # another thread's spans are not the step's
        steps(4)
        other.join()
        tap.poll()
        tap.poll()  # nothing new: no second window
        steps(2)
        ring.take()  # the trace CLI drained these two steps before the tap looked
        steps(4)
        tap.poll()
    finally:
        worker_spans.stop_recording()
    assert len(tap.windows) == 2
    phases = {p.phase: p.seconds for p in tap.phases(samples)}
    assert phases["data loading"] == pytest.approx(0.02, rel=0.3), phases
    assert phases["forward"] == pytest.approx(0.005, rel=0.6), phases


def test_span_tap_samples_the_phases_without_a_trace_window() -> None:
    from rankscope.trace import worker_spans

    tap = SpanTap(sample_every_s=0.001, sample_steps=3)
    worker_spans.stop_recording()  # a sample the probe's own tap may have left running here
    assert worker_spans.recording() is None
    tap.poll()  # a rank that marks no steps is never sampled
    assert worker_spans.recording() is None
    samples = [StepSample(0, time.time())]
    try:
        tap.poll(stepping=True)  # no window records: a sample starts
        assert worker_spans.recording() is not None
        for _ in range(4):
            with rankscope.span("load_batch"):
                time.sleep(0.01)
            with rankscope.span("forward"):
                time.sleep(0.001)
            rankscope.step()
            samples.append(StepSample(len(samples), time.time()))
        assert worker_spans.recording() is None  # it stopped itself after its 3 steps
        tap.poll(stepping=True)  # reads what the ended sample holds
        assert len(tap.windows) == 1
        phases = {p.phase: p.seconds for p in tap.phases(samples)}
        assert phases["data loading"] > 2 * phases["forward"] > 0, phases
    finally:
        worker_spans.stop_recording()


# --------------------------------------------------------------------- level off


def test_level_off_records_nothing_and_resumes_when_switched_back() -> None:
    torch = pytest.importorskip("torch")
    rec = step_recorder()
    rec.clear()
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    watch = rankscope.watch_nan(model)
    try:
        rankscope.step(loss=1.0)
        level.set_level("off")
        try:
            rankscope.step(loss=2.0)
            model(torch.full((2, 4), math.inf))
            assert watch.sums == [] and watch.check() == ""  # no hook work, no check
            assert rec.total == 1 and summary() is None
        finally:
            level.set_level("light")
        rankscope.step(loss=3.0)
        assert [s.loss for s in rec.samples()] == [1.0, 3.0]
        model(torch.full((2, 4), math.inf))
        assert "activation" in watch.check()
        assert summary() is not None
    finally:
        watch.remove()
        rec.clear()


def test_local_alert_line_and_finding_for_a_first_nonfinite() -> None:
    series = RankSeries(1, "g", "", "", (), NonFinite(12, 0.0, "loss", "nan"))
    (alert,) = finding_alerts([analysis.first_nonfinite([series])], 1.0)  # type: ignore[list-item]
    assert alert.rule == "non_finite" and alert.rank == 1
    assert alert.message == "rank 1 saw the first nan loss at step 12"


def test_the_groups_first_nan_is_named_at_the_rank_it_began_on_not_where_it_spread() -> None:
    def nan_at(rank: int, what: str, t: float) -> RankInput:
        base = _input(rank, 0.05, 0.01)
        assert base.summary is not None
        first = NonFinite(12, t, what, "nan")
        return replace(base, summary=replace(base.summary, first_nonfinite=first))

    # the all_reduce spread rank 2's NaN: rank 1's gradient said so a moment earlier
    inputs = [_input(0, 0.05, 0.01), nan_at(1, "gradient", 10.0), nan_at(2, "activation", 10.2)]
    [nan] = [f for f in group_findings(inputs, T) if f.kind is FindingKind.NON_FINITE]
    assert nan.ranks == (2,) and nan.step == 12
    assert (
        nan.evidence.startswith("rank 2 saw the first nan activation") and "ranks 1" in nan.evidence
    )
    [alert] = finding_alerts([nan], 11.0, "job")
    assert (alert.rule, alert.rank, alert.severity) == ("non_finite", 2, "critical")


def test_a_groups_first_nan_waits_for_the_rank_it_began_on_to_say_so() -> None:
    """The judge's own rank saw the spread NaN first; the rank it began on says so a
    heartbeat later: nothing is named before the NaN settled, then the right rank."""

    def nan_at(rank: int, what: str, t: float) -> RankInput:
        base = _input(rank, 0.05, 0.01)
        assert base.summary is not None
        return replace(
            base, summary=replace(base.summary, first_nonfinite=NonFinite(41, t, what, "nan"))
        )

    spread = [_input(2, 0.05, 0.01), nan_at(0, "gradient", 100.0)]
    assert not [f for f in group_findings(spread, T, now=101.0) if f.kind is FindingKind.NON_FINITE]
    settled = [nan_at(2, "activation", 100.3), nan_at(0, "gradient", 100.0)]
    [nan] = [f for f in group_findings(settled, T, now=102.6) if f.kind is FindingKind.NON_FINITE]
    assert nan.ranks == (2,)


def test_a_straggler_is_raised_only_once_every_judge_turn_has_seen_it_for_20_s() -> None:
    from rankscope.monitor.alert_rules import PERSIST_S, Persistence

    slow = _finding(FindingKind.STRAGGLER, 2)
    nan = _finding(FindingKind.NON_FINITE, 1, step=12)
    held = Persistence()
    assert held.held([slow, nan], 0.0) == [nan]  # a NaN needs no persistence
    assert held.held([slow], 10.0) == []
    assert held.held([slow], PERSIST_S) == [slow]
    assert held.held([], PERSIST_S + 10) == []  # gone at one turn: it starts over
    assert held.held([slow], PERSIST_S + 20) == []
    other = _finding(FindingKind.STRAGGLER, 3)
    assert held.held([slow, other], 2 * PERSIST_S + 20) == [slow]
