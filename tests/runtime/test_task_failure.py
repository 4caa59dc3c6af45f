"""The chain on Ray's task-failure hook, in this process: who gets a yes, listeners in order,
a failing listener contained. Ray's real `ray.util.pdb` functions are put back afterwards."""

from __future__ import annotations

import pytest
import ray.util

from rankscope.runtime import task_failure


@pytest.fixture
def chain(monkeypatch):
    hooks = ray.util.pdb
    monkeypatch.setattr(
        hooks, "_is_ray_debugger_post_mortem_enabled", hooks._is_ray_debugger_post_mortem_enabled
    )
    monkeypatch.setattr(hooks, "_post_mortem", hooks._post_mortem)
    monkeypatch.setattr(task_failure, "_installed", False)
    monkeypatch.setattr(task_failure, "_listeners", [])
    monkeypatch.delenv("RAY_DEBUG_POST_MORTEM", raising=False)
    assert task_failure.install()
    return hooks


def _asked_from(module: str) -> bool:
    """The flag as a function of `module` reads it (its frame's `__name__`)."""
    scope = {"__name__": module, "hooks": ray.util.pdb}
    exec("def ask():\n    return hooks._is_ray_debugger_post_mortem_enabled()", scope)
    return bool(scope["ask"]())


def test_only_rays_task_failure_path_gets_a_yes(chain):
    assert _asked_from("ray._private.worker")  # the frame below Cython's store_task_errors
    assert not _asked_from("ray.data._internal.planner.plan_udf_map_op")  # Ray's own answer
    assert not _asked_from("ray.serve._private.replica")
    assert not _asked_from(__name__)


def test_listeners_run_in_order_and_one_that_fails_stops_nothing(chain):
    seen: list[str] = []

    def broken(exc: BaseException, tb: object) -> None:
        raise RuntimeError("listener bug")

    task_failure.add_listener(lambda exc, tb: seen.append(f"session {exc}"))
    task_failure.add_listener(broken)
    task_failure.add_listener(lambda exc, tb: seen.append(f"record {exc}"), first=True)
    try:
        raise ValueError("bad batch")
    except ValueError:
        chain._post_mortem()  # as store_task_errors calls it, inside the except
    assert seen == ["record bad batch", "session bad batch"]
    assert task_failure.install()  # idempotent: one chain
