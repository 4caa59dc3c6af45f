"""A silent probe is looked for once early: a process proven gone is dead at once, one still
there waits for `dead_after` (a late heartbeat is no death). The registry's rules, and the
process check on this machine, no Ray."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from rankscope.context import RankContext
from rankscope.runtime.liveness import _process_exists
from rankscope.runtime.protocol import ProbeInfo, ProbeState, Progress
from rankscope.runtime.registry import EARLY_LOOK, Registry

T0 = 1_700_000_000.0
DEAD_AFTER = 5.0
EARLY = DEAD_AFTER * EARLY_LOOK


def _registry() -> Registry:
    registry = Registry(mailbox_size=4)
    ctx = RankContext(0, 0, 1, "n" * 56, "10.0.0.9", "w", 100, "job", None, "W", None, "explicit")
    registry.register(ProbeInfo("p0", ctx, "0", T0), Progress(0, T0), T0)
    return registry


def _checked(registry: Registry, at: float) -> list[str]:
    found = registry.to_check(at, DEAD_AFTER, interval=1.0)
    for record in found:
        record.checking = False
    return [r.info.probe_id for r in found]


def test_a_silent_probe_whose_process_is_gone_is_dead_at_the_early_look():
    registry = _registry()
    assert _checked(registry, T0 + EARLY - 0.1) == []  # a heartbeat or two late: no look
    [record] = registry.records("job")
    assert _checked(registry, T0 + EARLY + 0.1) == ["p0"]
    record.settle(process_exists=False, now=T0 + EARLY + 0.2, dead_after=DEAD_AFTER)
    assert record.state == ProbeState.DEAD  # not DEAD_AFTER later


def test_a_silent_probe_still_there_is_looked_at_once_early_then_at_dead_after():
    registry = _registry()
    [record] = registry.records("job")
    assert _checked(registry, T0 + EARLY + 0.1) == ["p0"]
    record.settle(process_exists=True, now=T0 + EARLY + 0.2, dead_after=DEAD_AFTER)
    assert record.state == ProbeState.ALIVE  # slow, not unresponsive yet
    assert _checked(registry, T0 + EARLY + 1.0) == []  # one early look a silence
    assert _checked(registry, T0 + DEAD_AFTER + 0.1) == ["p0"]
    record.settle(process_exists=True, now=T0 + DEAD_AFTER + 0.2, dead_after=DEAD_AFTER)
    assert record.state == ProbeState.UNRESPONSIVE


def test_a_heartbeat_during_the_look_wins():
    registry = _registry()
    [record] = registry.records("job")
    assert _checked(registry, T0 + EARLY + 0.1) == ["p0"]
    record.last_seen = T0 + EARLY + 0.15  # heard from while the look ran
    record.settle(process_exists=False, now=T0 + EARLY + 0.2, dead_after=DEAD_AFTER)
    assert record.state == ProbeState.ALIVE
    assert _checked(registry, T0 + 2 * EARLY + 0.2) == ["p0"]  # a new silence: a new look


def test_a_killed_process_not_yet_reaped_is_gone():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        created = psutil.Process(child.pid).create_time()
        assert _process_exists(child.pid, created)
        assert not _process_exists(child.pid, created + 100)  # the pid, reused by another
        child.kill()
        deadline = time.monotonic() + 10
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the killed child never became a zombie"
            time.sleep(0.01)
        assert not _process_exists(child.pid, created)  # a zombie: killed, its parent not told
    finally:
        child.kill()
        child.wait()
    assert not _process_exists(child.pid, created)
