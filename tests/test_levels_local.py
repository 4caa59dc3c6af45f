"""The one owner of the debug level: environment, switches, timed switch-back, sampling, and
the breakpoint flag that follows it."""

from __future__ import annotations

import pytest

import rankscope
from rankscope import level
from rankscope.config import Config
from rankscope.debug.breakpoint import debugging_enabled
from rankscope.errors import UserError
from rankscope.levels.handler import answer_level
from workers import wait_until


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
    from rankscope.trace import spans

    @rankscope.debug_decorator()
    def load_batch(index: int) -> int:
        return index

    ring = spans.start_recording(100)
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
        spans.stop_recording()
    assert len(taken) == 8
    attrs = [s[4] or {} for s in taken]
    expected = [str(i) for i in range(7) if (first + i) % 3 == 0]
    assert [a["args"]["index"] for a in attrs if "args" in a] == expected
    assert [a["args"]["index"] for a in attrs if "rss_delta_bytes" in a] == expected
    assert "args" not in attrs[-1] and "rss_delta_bytes" not in attrs[-1]
