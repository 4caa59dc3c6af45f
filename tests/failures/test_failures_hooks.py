"""The hooks on Ray Train's real runners (v2's ThreadRunner, v1's RunnerThread) and on
threading, in this process, with no cluster: each exception is recorded and the runner hands
it on exactly as before. Everything patched is put back afterwards."""

from __future__ import annotations

import importlib
import queue
import sys
import threading
import time

import pytest
import ray.util

from rankscope.failures import worker
from rankscope.failures.analysis import RateLimit
from rankscope.runtime import task_failure

V2 = "ray.train.v2._internal.execution.worker_group.thread_runner"
V1 = "ray.air._internal.util"


def train_loop() -> None:
    raise ValueError("bad batch")


@pytest.fixture
def installed(monkeypatch):
    """`worker.install()` as a probe's start-up runs it; returns what it recorded, by key."""
    v2, v1 = importlib.import_module(V2), importlib.import_module(V1)
    monkeypatch.setattr(
        v2, "construct_user_exception_with_traceback", v2.construct_user_exception_with_traceback
    )
    monkeypatch.setattr(
        v1.RunnerThread, "_propagate_exception", v1.RunnerThread._propagate_exception
    )
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    pdb = ray.util.pdb
    monkeypatch.setattr(
        pdb, "_is_ray_debugger_post_mortem_enabled", pdb._is_ray_debugger_post_mortem_enabled
    )
    monkeypatch.setattr(pdb, "_post_mortem", pdb._post_mortem)
    monkeypatch.setattr(task_failure, "_installed", False)
    monkeypatch.setattr(task_failure, "_listeners", [])
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(worker, "_installed", False)
    limit = RateLimit()
    monkeypatch.setattr(worker, "_limit", limit)
    worker.install()
    return limit._last


def _where() -> str:
    import inspect

    return f"test_failures_hooks.py:{inspect.getsourcelines(train_loop)[1] + 1}"


def _run_v2() -> str:
    """Ray Train v2's runner on `train_loop`: the text of the error it reports."""
    from ray.train.v2._internal.execution.worker_group.thread_runner import ThreadRunner

    runner = ThreadRunner()
    runner.run(train_loop)
    deadline = time.time() + 10
    while (runner.is_running() or runner.get_error() is None) and time.time() < deadline:
        time.sleep(0.01)
    error = runner.get_error()
    assert error is not None
    return str(error._traceback_str)


def test_ray_train_v2s_runner_records_and_reports_the_loop_as_before(installed, monkeypatch):
    module = sys.modules[V2]
    wrapper = module.construct_user_exception_with_traceback
    with monkeypatch.context() as unpatched:
        unpatched.setattr(module, "construct_user_exception_with_traceback", wrapper.__wrapped__)
        before = _run_v2()
    assert not installed
    after = _run_v2()
    assert ("ValueError", _where()) in installed
    assert after == before and "bad batch" in after  # Ray Train's own error is unchanged


def test_ray_train_v1s_runner_thread_records_and_propagates_as_before(installed):
    from ray.air._internal.util import RunnerThread

    errors: queue.Queue = queue.Queue(1)
    thread = RunnerThread(target=train_loop, daemon=True, error_queue=errors)
    thread.start()
    thread.join(10)
    assert isinstance(errors.get(timeout=5), ValueError)
    assert ("ValueError", _where()) in installed


def test_a_dying_thread_is_recorded_and_the_previous_hook_still_runs(installed, monkeypatch):
    seen: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.thread.name))
    worker._chain_thread_hook()  # as install() chains whatever hook the process had
    loader = threading.Thread(target=train_loop, name="loader")
    loader.start()
    loader.join(10)
    assert ("ValueError", _where()) in installed
    assert seen == ["loader"]
