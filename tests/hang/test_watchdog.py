"""The watchdog's no-step trigger counts work, not wall time: a rank waiting for work is not hung.

RL trainers (verl) leave their workers idle in Ray's task loop for minutes between calls; only a
rank running a task or user code (in any thread) without `rankscope.step()` is reported.
"""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
import ray

from helpers.cluster import probes_by_pid, wait_registered
from helpers.workers import GlooRank, wait_until
from rankscope.context import get_context
from rankscope.hang.model import CallState, CollectiveRecord
from rankscope.hang.worker_activity import find_work
from rankscope.hang.worker_watchdog import check_interval, report_claim
from rankscope.runtime.client import HubClient
from rankscope.runtime.hub import find_hub
from rankscope.stacks.model import Frame, ThreadStack

HANG_TIMEOUT = 1.5
PID_MAX_LIMIT = 4_194_304
"""Linux's highest pid: adding it names a process that cannot exist."""

# ------------------------------------------------------------------ find_work, synthetic stacks
SITE = "/venv/lib/python3.11/site-packages"
RAY_LOOP = Frame("main_loop", f"{SITE}/ray/_private/worker.py", 900, True)
WORKER_MODULE = Frame("<module>", f"{SITE}/ray/_private/workers/default_worker.py", 330, True)
RUNNER = Frame("actor_method_executor", f"{SITE}/ray/_private/function_manager.py", 690, True)
QUEUE_WAIT = (
    Frame("wait", "/usr/lib/python3.11/threading.py", 327, True),
    Frame("get", "/usr/lib/python3.11/queue.py", 171, True),
    Frame("_worker", "/usr/lib/python3.11/concurrent/futures/thread.py", 81, True),
    Frame("run", "/usr/lib/python3.11/threading.py", 982, True),
)
GC_THREAD = ThreadStack("gc", 2, False, QUEUE_WAIT)


def _main(*frames: Frame) -> ThreadStack:
    return ThreadStack("MainThread", 1, True, frames)


def test_a_ray_worker_in_its_task_loop_waits_for_work():
    assert find_work([_main(RAY_LOOP, WORKER_MODULE), GC_THREAD], None) is None
    pool_thread_idle = ThreadStack("ThreadPoolExecutor-0_0", 3, False, QUEUE_WAIT)
    assert find_work([_main(RAY_LOOP, WORKER_MODULE), pool_thread_idle], None) is None


def test_a_task_of_library_code_is_work():
    verl = Frame("update_actor", f"{SITE}/verl/workers/fsdp_workers.py", 500, True)
    work = find_work([GC_THREAD, _main(verl, RUNNER, RAY_LOOP, WORKER_MODULE)], None)
    assert work == "thread MainThread running a Ray task, at update_actor fsdp_workers.py:500"
    pool = ThreadStack("ThreadPoolExecutor-0_0", 3, False, (verl, RUNNER, *QUEUE_WAIT))
    assert find_work([_main(RAY_LOOP, WORKER_MODULE), pool], None) is not None


def test_user_code_in_any_thread_and_collectives_are_work():
    user = Frame("train_loop", "/home/me/train.py", 42, False)
    sleep = Frame("wait", "/usr/lib/python3.11/threading.py", 320, True)
    train_thread = ThreadStack("train", 4, False, (sleep, user, *QUEUE_WAIT[-1:]))
    idle_main = _main(RAY_LOOP, WORKER_MODULE)
    assert find_work([idle_main, train_thread], None) == (
        "thread train in user code, at wait <- train_loop train.py:42"
    )
    reduce = Frame("all_reduce", f"{SITE}/torch/distributed/distributed_c10d.py", 2500, True)
    in_reduce = ThreadStack("train", 4, False, (reduce, user))
    assert find_work([idle_main, train_thread, in_reduce], None) == (
        "thread train in torch.distributed, at all_reduce <- train_loop train.py:42"
    )
    call = CollectiveRecord("0", 7, "all_reduce", ((4,),), ("float32",), 1.0, None,
                            CallState.STARTED, "train.py:42")  # fmt: skip
    assert find_work([idle_main], call) == "in all_reduce #7 of group 0 (train.py:42)"


# ------------------------------------------------------------------ the watchdog on real ranks
@pytest.fixture
def rank(cluster):
    """One rank with hang_timeout 1.5 s that has stepped once; its probe's id."""
    actor = ray.remote(num_cpus=0)(GlooRank).remote(
        0, 1, explicit_rank=True, hang_timeout=HANG_TIMEOUT
    )
    pid = ray.get(actor.pid.remote())
    wait_registered([pid], ranked=True)
    ray.get(actor.train.remote(1))
    yield actor, probes_by_pid([pid])[pid].info.probe_id
    ray.kill(actor)


def _reports_of(probe_id: str) -> list[dict]:
    """The `hang_report` events this probe sent (the run directory's, through the hub)."""
    job_id = ray.get_runtime_context().get_job_id()
    events = HubClient.attach().events(job_id, ["hang_report"], limit=10_000)
    return [e for e in events if e["probe_id"] == probe_id]


def _wait_report(probe_id: str) -> dict:
    [event] = wait_until(lambda: _reports_of(probe_id), timeout=60, what="the watchdog's report")
    with open(event["payload"]["path"]) as f:
        assert json.load(f)["reason"] == event["payload"]["reason"]
    return event


def _idle_for(actor, timeouts: float) -> dict:
    """Until the watchdog has checked the rank `timeouts` hang_timeouts after its last step."""

    def watched() -> dict | None:
        state = ray.get(actor.watchdog_state.remote())
        return state if state["last_check"] - state["last_step"] > timeouts * HANG_TIMEOUT else None

    return wait_until(watched, timeout=60, what="the watchdog to watch an idle rank")


def test_rank_idle_between_calls_is_not_reported(rank):
    actor, probe_id = rank

    state = _idle_for(actor, 3)

    assert state["step"] == 1
    assert state["triggers"] == []
    assert _reports_of(probe_id) == []


def test_method_running_user_code_without_a_step_is_reported(rank, tmp_path):
    """Also while another group of the job, and another rank with no group, hold their
    reports' claims for a long timeout (a rank left in a collective at the default 300 s, as a
    verl job's other worker group can be, or another test's rank)."""
    actor, probe_id = rank
    hub = find_hub()
    assert hub is not None
    job_id = ray.get_runtime_context().get_job_id()
    here = get_context()  # a process of the job with no group, as the rank under test
    assert here.group is None
    # another process with no group: not this one, whose claim another test may hold already
    elsewhere = dataclasses.replace(here, pid=here.pid + PID_MAX_LIMIT)
    for other in (dataclasses.replace(here, group="another-group"), elsewhere):
        assert ray.get(hub.claim.remote(job_id, report_claim(other), 600.0))
    release = tmp_path / "release"
    stalled = actor.wait_for.remote(str(release))  # wait_for_data: time.sleep in user code

    event = _wait_report(probe_id)

    release.write_text("go")
    ray.get(stalled)
    reason = event["payload"]["reason"]
    assert reason.startswith("no rankscope.step() for "), reason
    assert "thread MainThread in user code, at wait_for_data workers.py:" in reason


def test_user_code_in_a_thread_the_method_started_is_reported(rank, tmp_path):
    actor, probe_id = rank
    release = tmp_path / "release"
    ray.get(actor.wait_in_thread.remote(str(release)))  # returns: the main thread waits for work

    event = _wait_report(probe_id)

    state = ray.get(actor.watchdog_state.remote())  # answered: the main thread is free
    release.write_text("go")
    reason = event["payload"]["reason"]
    assert "thread train-loop in user code, at wait_for_data workers.py:" in reason
    assert [why for _, why in state["triggers"]] == [reason]


def test_task_that_stalls_after_a_long_idle_is_reported_after_hang_timeout_of_work(rank, tmp_path):
    actor, probe_id = rank
    assert _idle_for(actor, 3)["triggers"] == []
    release = tmp_path / "release"
    submitted = time.time()
    stalled = actor.wait_for.remote(str(release))

    event = _wait_report(probe_id)

    release.write_text("go")
    ray.get(stalled)
    [(fired, why)] = ray.get(actor.watchdog_state.remote())["triggers"]
    assert why == event["payload"]["reason"]
    assert "thread MainThread in user code, at wait_for_data" in why
    # hang_timeout of work counted from the task's start, not from the step long before (same
    # machine, same clock); less a check interval: a check may have caught the last poll above
    assert fired - submitted > HANG_TIMEOUT - check_interval(HANG_TIMEOUT)
