"""The probe's handler budget: heavy handlers run on one worker thread, answer "took longer"
past the budget and "still busy" while they run, and light commands still answer meanwhile.

The first tests drive a real (unstarted) Probe's dispatch from this process with real threads;
the last one goes through a real hub to a probe in a Ray actor.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import ray

import rankscope
from helpers.workers import wait_until
from rankscope.config import Config
from rankscope.errors import UserError
from rankscope.memory.model import RankMemoryReply
from rankscope.runtime import probe as probe_module
from rankscope.runtime.probe import (
    HANDLER_THREAD_NAME,
    OWN_THREAD_PREFIX,
    Probe,
    register_handler,
    register_summary,
)
from rankscope.runtime.protocol import SUMMARIES_BUDGET_BYTES, Command
from rankscope.stacks.model import ThreadStack

BUDGET = 0.2
SLOW = "test_slow"
HANDLER_WAIT_S = 60.0
"""How long a blocked test handler waits to be released: a failing test never leaves it forever."""


class Blocker:
    """A handler that blocks until released, counting its calls and naming its thread."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.finished = threading.Event()
        self.calls = 0
        self.threads: list[str] = []

    def __call__(self, args: dict[str, Any]) -> str:
        self.calls += 1
        self.threads.append(threading.current_thread().name)
        self.release.wait(HANDLER_WAIT_S)
        self.finished.set()
        return "done"


@pytest.fixture
def registry() -> Iterator[None]:
    """Test-only kinds registered in a test are gone after it."""
    handlers, off_thread = dict(probe_module._HANDLERS), set(probe_module._OFF_THREAD)
    summaries = dict(probe_module._SUMMARIES)
    yield
    probe_module._SUMMARIES.clear()
    probe_module._SUMMARIES.update(summaries)
    probe_module._over_budget.discard("test_bloated")
    probe_module._HANDLERS.clear()
    probe_module._HANDLERS.update(handlers)
    probe_module._OFF_THREAD.clear()
    probe_module._OFF_THREAD.update(off_thread)


def ask(probe: Probe, kind: str, args: dict[str, Any] | None = None):
    return probe.run_command(Command(id=f"{kind}-cmd", kind=kind, args=args or {}))


def test_every_answer_carries_the_ranks_progress_as_it_answered(registry):
    """The registry's progress is from the last heartbeat, up to the hub's interval old (25 s
    at 4,096 ranks): an answer says where training is now, on the rank's own clock."""
    register_handler(SLOW, off_thread=True)(lambda args: "done")
    probe = Probe(Config(handler_budget=BUDGET))
    before = probe_module.progress.step
    rankscope.step()
    rankscope.step()

    for kind in ("stacks", SLOW, "no-such-command"):
        start = time.time()
        reply = ask(probe, kind)
        assert reply.progress == probe_module.progress.snapshot()
        assert reply.progress.step == before + 2
        assert start <= reply.answered_at <= time.time()


def test_a_slow_handler_is_cut_off_at_the_budget_and_light_commands_still_answer(registry):
    blocker = Blocker()
    register_handler(SLOW, off_thread=True)(blocker)
    probe = Probe(Config(handler_budget=BUDGET))
    try:
        late = ask(probe, SLOW)
        assert not late.ok
        assert late.error == (
            f"{SLOW} took longer than 0.2 s; answered nothing (the process is busy); try again"
        )
        assert late.probe_id == probe.probe_id

        stacks = ask(probe, "stacks")  # inline on this thread, while the slow one still runs
        assert stacks.ok, stacks.error
        names = {t.thread_name for t in stacks.payload}
        assert all(isinstance(t, ThreadStack) for t in stacks.payload)
        assert threading.current_thread().name in names
        assert HANDLER_THREAD_NAME in {t.name for t in threading.enumerate()}
        assert not any(n.startswith(OWN_THREAD_PREFIX) for n in names)  # the worker left out

        busy = ask(probe, SLOW)  # answered while the first one is still blocked: not queued
        assert not busy.ok
        assert busy.error == f"still busy with the previous {SLOW} request; try again"
        assert not blocker.finished.is_set()
        assert blocker.calls == 1
    finally:
        blocker.release.set()
    assert blocker.finished.wait(HANDLER_WAIT_S)
    wait_until(lambda: probe.busy_with is None, what="the worker to be free")
    assert blocker.threads == [HANDLER_THREAD_NAME]
    assert HANDLER_THREAD_NAME.startswith(OWN_THREAD_PREFIX)

    again = ask(probe, SLOW)  # the worker is free again and answers in time
    assert again.ok, again.error
    assert again.payload == "done"
    assert blocker.calls == 2  # the "still busy" request never ran
    probe.stop()


def test_light_handlers_stay_inline_with_the_old_call_form(registry):
    @register_handler("test_light")
    def light(args: dict[str, Any]) -> str:
        return threading.current_thread().name

    @register_handler("test_heavy", off_thread=True)
    def heavy(args: dict[str, Any]) -> str:
        return threading.current_thread().name

    probe = Probe(Config(handler_budget=5.0))
    assert ask(probe, "test_light").payload == threading.current_thread().name
    assert ask(probe, "test_heavy").payload == HANDLER_THREAD_NAME
    # registering a kind again without off_thread makes it inline again
    register_handler("test_heavy")(heavy)
    assert ask(probe, "test_heavy").payload == threading.current_thread().name
    assert "memory" in probe_module._OFF_THREAD
    assert not {"stacks", "collectives", "environment", "debug_sessions"} & probe_module._OFF_THREAD
    probe.stop()


def test_off_thread_errors_and_unknown_commands_are_replies(registry):
    @register_handler("test_broken", off_thread=True)
    def broken(args: dict[str, Any]) -> None:
        raise ValueError("boom")

    probe = Probe(Config(handler_budget=5.0))
    reply = ask(probe, "test_broken")
    assert (reply.ok, reply.error) == (False, "ValueError: boom")
    assert ask(probe, "test_broken").error == "ValueError: boom"  # the worker survived
    unknown = ask(probe, "test_nothing")
    assert (unknown.ok, unknown.error) == (False, "unknown command test_nothing")
    probe.stop()
    stopped = ask(probe, "test_broken")
    assert (stopped.ok, stopped.error) == (False, "the probe is stopping")


def test_a_summary_over_the_heartbeat_budget_is_left_out_with_one_warning(registry, caplog):
    """Features share one byte budget per heartbeat: one that outgrows it loses its own
    summary (a note says why, a warning once), and the others' summaries still go."""
    register_summary("test_bloated")(lambda: "z" * (2 * SUMMARIES_BUDGET_BYTES))
    with caplog.at_level(logging.WARNING, logger="rankscope"):
        first, second = probe_module._summaries(), probe_module._summaries()
    assert "over the heartbeat budget" in first["test_bloated"]["error"]
    assert sum(first.sizes().values()) <= SUMMARIES_BUDGET_BYTES
    assert first["where"] == second["where"] and "where" in first  # the others still go
    warned = [r for r in caplog.records if "test_bloated" in r.getMessage()]
    assert len(warned) == 1 and "budget" in warned[0].getMessage()


def test_budget_is_a_config_value(monkeypatch):
    assert Config().handler_budget < Config().command_deadline
    monkeypatch.setenv("RANKSCOPE_HANDLER_BUDGET", "0.5")
    assert Config.from_env().handler_budget == 0.5
    monkeypatch.setenv("RANKSCOPE_HANDLER_BUDGET", "0")
    with pytest.raises(UserError, match="handler_budget"):
        Config.from_env()


class SlowRank:
    """A Ray actor whose probe has a small budget and a test-only handler that blocks."""

    def __init__(self) -> None:
        self.blocker = Blocker()
        register_handler(SLOW, off_thread=True)(self.blocker)
        rankscope.init(rank=0, world_size=1, group="probe-budget-test")

    def pid(self) -> int:
        return os.getpid()

    def release(self) -> int:
        """Let the blocked handler return; its number of calls once the worker is free."""
        from rankscope.runtime.api import current_probe

        self.blocker.release.set()
        probe = current_probe()
        assert probe is not None
        wait_until(lambda: probe.busy_with is None, what="the worker to be free")
        return self.blocker.calls


def test_through_the_hub_late_then_light_then_busy(cluster):
    from helpers.cluster import probes_by_pid, wait_registered
    from rankscope.runtime.client import HubClient

    actor = ray.remote(num_cpus=0)(SlowRank).options(
        runtime_env={"env_vars": {"RANKSCOPE_HANDLER_BUDGET": "0.5"}}
    )
    rank = actor.remote()
    try:
        pid = ray.get(rank.pid.remote(), timeout=120)
        wait_registered([pid])
        target = [probes_by_pid([pid])[pid]]
        client = HubClient.attach()

        (late,) = client.fan_out(SLOW, target, deadline_s=3.0).replies
        assert late.error == (
            f"{SLOW} took longer than 0.5 s; answered nothing (the process is busy); try again"
        )
        stacks = client.fan_out("stacks", target, deadline_s=3.0)
        assert not stacks.missing
        assert stacks.replies[0].ok, stacks.replies[0].error
        assert {t.thread_name for t in stacks.replies[0].payload} >= {"MainThread"}
        (busy,) = client.fan_out(SLOW, target, deadline_s=3.0).replies
        assert busy.error == f"still busy with the previous {SLOW} request; try again"

        assert ray.get(rank.release.remote(), timeout=60) == 1  # the busy request never ran
        memory = client.fan_out("memory", target, deadline_s=3.0)
        assert not memory.missing
        assert memory.replies[0].ok, memory.replies[0].error
        assert isinstance(memory.replies[0].payload, RankMemoryReply)
        assert memory.replies[0].payload.snapshot.pid == pid
    finally:
        ray.kill(rank)
