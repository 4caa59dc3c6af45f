"""The one owner of the debug level: environment, switches, timed switch-back, sampling, and
the breakpoint flag that follows it."""

from __future__ import annotations

import pytest

import rankscope
from helpers.workers import wait_until
from rankscope import level
from rankscope.config import Config
from rankscope.debug.worker_breakpoint import debugging_enabled
from rankscope.errors import UserError
from rankscope.levels.worker import answer_level


@pytest.fixture(autouse=True)
def _light():
    level.set_level("light")
    level.configure(sample_every=1)
    yield
    level.set_level("light")
    level.configure(sample_every=1)


def test_environment():
    assert level.level_from_env({}) == "light"
    assert level.level_from_env({"RANKSCOPE_DEBUG": "1"}) == "full"
    assert level.level_from_env({"RANKSCOPE_LEVEL": "off", "RANKSCOPE_DEBUG": "1"}) == "off"
    with pytest.raises(UserError, match="is not one of off, light, full"):
        level.level_from_env({"RANKSCOPE_LEVEL": "verbose"})


def test_config_reads_the_same_level(monkeypatch):
    monkeypatch.delenv("RANKSCOPE_LEVEL", raising=False)
    monkeypatch.setenv("RANKSCOPE_DEBUG", "1")
    assert Config.from_env().level == "full"
    monkeypatch.setenv("RANKSCOPE_SAMPLE_EVERY", "4")
    assert Config.from_env().sample_every == 4


def test_seed_functions_and_breakpoints_follow_the_one_level():
    rankscope.enable_full_debugging()
    assert level.current().level == "full" and debugging_enabled() and level.FULL
    rankscope.enable_lightweight_monitoring()
    assert level.current().level == "light" and not debugging_enabled()


def test_timed_switch_goes_back():
    state = level.set_level("full", for_s=0.3)
    assert state.back_to == "light" and state.until is not None
    wait_until(lambda: level.current().level == "light", timeout=5, what="the switch back")
    assert not level.FULL


def test_probe_command_switches_and_reports():
    assert answer_level({"level": "off"}).level == "off"
    assert not level.recording()
    assert answer_level({}).level == "off"
    assert answer_level({"level": "full", "for_s": 60}).back_to == "off"
    with pytest.raises(UserError):
        answer_level({"level": "loud"})


def test_a_live_sample_every_switch_goes_back_with_the_level():
    """`rankscope level full --sample-every 10 --for 0.3s` through the probe's command: both
    switch, both come back; a second timed switch meanwhile keeps the original to return to."""
    rankscope.configure(sample_every=2)
    state = answer_level({"level": "full", "sample_every": 10, "for_s": 0.3})
    assert (state.level, state.sample_every) == ("full", 10)
    assert (state.back_to, state.back_sample_every) == ("light", 2)
    state = answer_level({"level": None, "sample_every": 5, "for_s": 0.3})
    assert (state.level, state.sample_every, state.back_sample_every) == ("full", 5, 2)
    wait_until(lambda: level.current().level == "light", timeout=5, what="the switch back")
    assert level.current().sample_every == 2 and level.current().back_sample_every is None
    assert answer_level({"sample_every": 7}).sample_every == 7  # no LEVEL: the level stays
    assert level.current().level == "light"


def test_a_sampling_only_switch_keeps_the_pending_switch_back():
    """`rankscope level --sample-every 5` (no LEVEL, no --for) during a `--for` keeps the
    timer: the rank still goes back to its level instead of staying at `full` for good."""
    first = answer_level({"level": "full", "for_s": 0.5})
    state = answer_level({"sample_every": 5})
    assert (state.level, state.sample_every) == ("full", 5)
    assert (state.until, state.back_to) == (first.until, "light")
    wait_until(lambda: level.current().level == "light", timeout=5, what="the switch back")
    assert level.current().back_to is None and level.current().sample_every == 1


@pytest.mark.parametrize("bad", ["0", "-3", "1.5", "ten"])
def test_bad_sample_every_is_one_line_exit_2(bad):
    """Checked before the CLI looks for a hub (CliRunner, no cluster needed)."""
    from typer.testing import CliRunner

    import rankscope.cli.main as cli

    result = CliRunner().invoke(cli.app, ["level", "full", "--sample-every", bad])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "--sample-every" in lines[0] and "whole number" in lines[0], lines


def test_sampling_runs_full_features_on_every_nth_step():
    rankscope.configure(sample_every=3)
    assert not level.full_at(3)  # light: never
    level.set_level("full")
    assert [s for s in range(10) if level.full_at(s)] == [0, 3, 6, 9]
    with pytest.raises(UserError, match="sample_every"):
        rankscope.configure(sample_every=0)


def test_sampling_gates_debug_decorator_capture_and_memory_by_step():
    """At `full` with `configure(sample_every=3)`, a decorated function called once per step
    captures its arguments and memory on steps 0, 3, 6 only; at light, never."""
    from rankscope.runtime.probe import progress
    from rankscope.trace import worker_spans

    @rankscope.debug_decorator()
    def load_batch(index: int) -> int:
        return index

    ring = worker_spans.start_recording(100)
    try:
        rankscope.configure(sample_every=3)
        level.set_level("full")
        first = progress.step
        for i in range(7):
            load_batch(i)
            rankscope.step()
        level.set_level("light")
        load_batch(-1)  # light: no capture even on a sampled step
        taken, _, _ = ring.take()
    finally:
        worker_spans.stop_recording()
    assert len(taken) == 8
    attrs = [s[4] or {} for s in taken]
    expected = [str(i) for i in range(7) if (first + i) % 3 == 0]
    assert [a["args"]["index"] for a in attrs if "args" in a] == expected
    assert [a["args"]["index"] for a in attrs if "rss_delta_bytes" in a] == expected
    assert "args" not in attrs[-1] and "rss_delta_bytes" not in attrs[-1]


def test_breakpoints_stop_only_on_sampled_steps():
    """At `full` with `sample_every=3` a breakpoint (condition true, a real pdb session that
    times out at once) stops on steps 0, 3, 6 of 7 only; its condition is not evaluated on the
    others; at light never."""
    from rankscope.runtime.probe import progress

    stopped: list[int] = []

    def condition() -> bool:
        stopped.append(progress.step - first)
        return True

    rankscope.configure(sample_every=3)
    level.set_level("full")
    first = progress.step
    offset = (-first) % 3  # the first sampled step, counted from `first`
    for _ in range(7):
        rankscope.conditional_breakpoint(condition, name="sampled", timeout=0.01)
        rankscope.step()
    level.set_level("light")
    rankscope.conditional_breakpoint(condition, timeout=0.01)
    assert stopped == list(range(offset, 7, 3))


def test_live_off_pauses_the_collective_recorder_and_its_summary(tmp_path):
    import torch
    import torch.distributed as dist

    from rankscope.hang.worker import last_collectives
    from rankscope.hang.worker_recorder import (
        collective_recorder,
        record_collectives,
        stop_recording,
    )

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rdv", rank=0, world_size=1)
    record_collectives()
    recorder = collective_recorder()
    try:
        dist.all_reduce(torch.ones(2))
        before, first = recorder.total, recorder.snapshot().records[-1]
        level.set_level("off")
        dist.all_reduce(torch.ones(2))
        dist.all_reduce(torch.ones(2))
        while_off, snapshot, summary = recorder.total, recorder.snapshot(), last_collectives()
        level.set_level("light")
        dist.all_reduce(torch.ones(2))
        resumed = recorder.snapshot()
    finally:
        stop_recording()
        dist.destroy_process_group()
    assert while_off == before and snapshot.paused and snapshot.records[-1] == first
    assert summary.paused and summary.records == ()  # not summarised either
    assert recorder.total == before + 1 and not resumed.paused
    assert resumed.records[-1].seq == first.seq + 3  # torch's own counter: still aligned


def test_the_watchdog_checks_nothing_at_live_off_and_counts_afresh_after():
    import time
    from types import SimpleNamespace

    from rankscope.hang.worker_watchdog import Watchdog

    dog = Watchdog(SimpleNamespace(config=SimpleNamespace(hang_timeout=0.05), alive=False))
    rankscope.step()
    dog._check()
    time.sleep(0.2)
    assert dog._busy_without_step(time.time()) > 0.05  # at light it would report now
    level.set_level("off")
    dog._check()
    assert dog.triggers == [] and dog.busy_since is None
    level.set_level("light")
    assert dog._busy_without_step(time.time()) < 0.05


def test_a_hang_report_says_which_ranks_are_at_level_off():
    from rankscope.hang.analysis import RankEvidence, analyze_hang
    from rankscope.hang.model import CallState, CollectiveRecord

    def rec(seq: int, state: CallState = CallState.COMPLETED) -> CollectiveRecord:
        end = None if state is CallState.STARTED else 901.0
        return CollectiveRecord(
            "0", seq, "all_reduce", ((4,),), ("f32",), 900.0, end, state, "t.py:1"
        )

    groups = {"0": (0, 1)}
    report = analyze_hang(
        "job",
        [
            RankEvidence(0, (rec(7), rec(8, CallState.STARTED)), groups),
            RankEvidence(1, (rec(3),), groups, paused=True),
        ],
        now=1000.0,
    )
    assert report.paused_ranks == (1,)
    (finding,) = report.findings
    assert "rank 1 never entered #8, its last completed collective is #3 (its level is off" in (
        finding.message
    )


def test_sample_every_from_the_environment_at_start():
    import subprocess
    import sys

    code = "from rankscope import level; print(level.current().sample_every)"
    env = {"RANKSCOPE_SAMPLE_EVERY": "4", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.stdout.strip() == "4", result.stderr


def test_level_full_traces_all_the_time_and_a_window_starts_with_what_came_before():
    """`full` includes tracing: spans go to the level's own bounded ring, a `rankscope trace`
    window's first chunk holds the spans from before it, and the ring records on after the
    window; back at light, span recording stops."""
    from rankscope.trace import worker, worker_spans
    from rankscope.trace.model import TraceOptions

    worker_spans.stop_recording()  # a phase sample the monitor's tap may have left running (light)
    assert worker_spans.recording() is None  # light: a span is one lookup
    level.set_level("full")
    with rankscope.span("before the window"):
        pass
    first = worker.trace_command({"action": "start", "session": "full", "options": TraceOptions()})
    assert [s[0] for s in first.spans] == ["before the window"]
    with rankscope.span("inside"):
        pass
    last = worker.trace_command({"action": "stop", "session": "full"})
    assert [s[0] for s in last.spans] == ["inside"]
    with rankscope.span("after the window"):
        pass
    ring = worker_spans.recording()
    assert ring is not None and [s[0] for s in ring.spans] == ["after the window"]
    level.set_level("light")
    assert worker_spans.recording() is None
