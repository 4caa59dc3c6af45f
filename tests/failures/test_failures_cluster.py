"""An exception that ends one rank's work, caught where it arises on real gloo ranks in Ray
actors: rank 2's method raises while ranks 0, 1 and 3 wait for it in all_reduce. No try/except
in the user's code; the record reaches the hub within seconds, as an event and an alert."""

from __future__ import annotations

import json
import time

import pytest
import ray

from helpers.cluster import cluster_address, run_cli, wait_registered
from helpers.workers import GlooRank, form_group, wait_until
from rankscope.runtime.client import HubClient

BAD = 2


def _line_of(text: str) -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if text in line and "_line_of" not in line)


RAISE_LINE = _line_of('raise ValueError("bad batch")')
THREAD_LINE = _line_of('raise KeyError("shard 7")')


def load_batch(rank: int) -> int:
    """The user's code under the method: the innermost frame of theirs when it raises."""
    if rank == BAD:
        raise ValueError("bad batch")
    return rank


def read_shard() -> None:
    """A user thread's code that raises (another type and place than `load_batch`)."""
    raise KeyError("shard 7")


class FailingRank(GlooRank):
    def train_step(self) -> None:
        import torch
        import torch.distributed as dist

        load_batch(self.rank)
        dist.all_reduce(torch.ones(4))

    async def async_step(self) -> None:  # an async actor method: Ray's hook covers it too
        load_batch(self.rank)

    def thread_step(self) -> None:
        """A user thread that dies of the exception (threading.excepthook)."""
        import threading

        worker = threading.Thread(target=read_shard, name="loader")
        worker.start()
        worker.join()


@pytest.fixture
def four_ranks(cluster, hub):
    actor = ray.remote(num_cpus=0)(FailingRank)
    actors = [actor.remote(r, 4) for r in range(4)]
    form_group(actors)
    pids = ray.get([a.pid.remote() for a in actors])
    wait_registered(pids, ranked=True)
    yield actors, pids
    for a in actors:
        ray.kill(a)


def _task_errors(pid: int, since: float) -> list[dict]:
    job_id = ray.get_runtime_context().get_job_id()
    events = HubClient.attach().events(job_id, ["task_error", "alert"], limit=500)
    return [e for e in events if e["payload"].get("pid") == pid and e["time"] >= since]


def test_a_rank_raising_while_its_peers_wait_is_named_within_seconds(four_ranks):
    actors, pids = four_ranks
    start = time.time()
    refs = [a.train_step.remote() for a in actors]  # ranks 0, 1, 3 wait in all_reduce
    with pytest.raises(ray.exceptions.RayTaskError, match="bad batch"):
        ray.get(refs[BAD], timeout=60)

    def recorded() -> list[dict]:
        events = _task_errors(pids[BAD], start)
        kinds = {e["kind"] for e in events}
        return events if {"task_error", "alert"} <= kinds else []

    events = wait_until(recorded, timeout=5, what="rank 2's task_error and alert at the hub")
    [error] = [e["payload"] for e in events if e["kind"] == "task_error"]
    assert (error["rank"], error["exc_type"], error["message"]) == (BAD, "ValueError", "bad batch")
    assert error["where"] == f"test_failures_cluster.py:{RAISE_LINE}"
    assert (error["function"], error["via"], error["echo"]) == ("load_batch", "ray_task", False)
    assert error["path"] == __file__ and error["actor"] == "FailingRank"
    assert "train_step" in error["task"]
    assert error["traceback"].rstrip().endswith("ValueError: bad batch")
    [alert] = [e["payload"] for e in events if e["kind"] == "alert"]
    assert (alert["rule"], alert["severity"], alert["rank"]) == ("exception", "error", BAD)
    assert alert["message"] == (
        f"rank 2 raised ValueError: bad batch (test_failures_cluster.py:{RAISE_LINE})"
    )
    others = [e for pid in pids if pid != pids[BAD] for e in _task_errors(pid, start)]
    assert not others and not error["in_collective"]  # the waiting ranks raised nothing
    job = ["--job", ray.get_runtime_context().get_job_id(), "--address", cluster_address()]
    listed = run_cli("events", "--kind", "task_error", *job, env={"COLUMNS": "250"})
    assert alert["message"] in listed.stdout, listed.stdout  # the summary is the event's line
    raised = run_cli("alerts", "--json", *job)
    assert raised.returncode == 1  # an active alert, with no command run before
    assert any(
        a["rule"] == "exception" and a["message"] == alert["message"] and a["active"]
        for j in json.loads(raised.stdout)["data"]
        for a in j["alerts"]
    ), raised.stdout

    ray.kill(actors[BAD])  # now their all_reduce fails: an effect, told apart from the cause

    def effects() -> list[dict]:  # gloo fails some waiting ranks at once (rank 0 may wait on)
        found = [e for pid in pids if pid != pids[BAD] for e in _task_errors(pid, start)]
        return found if any(e["kind"] == "task_error" for e in found) else []

    found = wait_until(effects, timeout=30, what="the waiting ranks' failed all_reduce")
    errors = [e["payload"] for e in found if e["kind"] == "task_error"]
    assert all(e["in_collective"] and e["function"] == "train_step" for e in errors), errors
    time.sleep(1.0)  # an alert would come with the event, sent at once
    found = [e for pid in pids if pid != pids[BAD] for e in _task_errors(pid, start)]
    assert not [e for e in found if e["kind"] == "alert"], found  # effects page no one


def test_async_methods_and_dying_threads_are_recorded_once_per_place(four_ranks):
    actors, pids = four_ranks
    start = time.time()
    for _ in range(2):  # the same error twice at once: one record (rate limit)
        with pytest.raises(ray.exceptions.RayTaskError):
            ray.get(actors[BAD].async_step.remote(), timeout=60)
    ray.get(actors[BAD].thread_step.remote(), timeout=60)  # the thread dies; the method returns

    def both() -> list[dict]:
        errors = [e["payload"] for e in _task_errors(pids[BAD], start) if e["kind"] == "task_error"]
        return errors if {e["via"] for e in errors} == {"ray_task", "thread"} else []

    errors = wait_until(both, timeout=10, what="the async method's and the thread's records")
    time.sleep(1.0)  # a second record of the repeated error would have come by now
    errors = [e["payload"] for e in _task_errors(pids[BAD], start) if e["kind"] == "task_error"]
    assert sorted(e["via"] for e in errors) == ["ray_task", "thread"]
    [thread] = [e for e in errors if e["via"] == "thread"]
    assert (thread["task"], thread["exc_type"], thread["message"]) == (
        "loader",
        "KeyError",
        "'shard 7'",
    )
    assert thread["where"] == f"test_failures_cluster.py:{THREAD_LINE}"
