"""Choosing processes by job and group (pure): `--group` without `--job` finds the live job
that runs that group, and says so in one line when none does."""

from __future__ import annotations

import time

import pytest

from rankscope.context import RankContext
from rankscope.errors import UserError
from rankscope.runtime.protocol import ProbeInfo, ProbeState, ProbeStatus, Progress
from rankscope.runtime.selection import filter_jobs_by_group


def _probe(job: str, group: str | None, rank: int) -> ProbeStatus:
    ctx = RankContext(
        rank, rank, 2, "node", "10.0.0.1", "host", 1000 + rank, job, None, "Worker", None,
        "explicit", group=group,
    )  # fmt: skip
    now = time.time()
    info = ProbeInfo(f"{job}-{group}-{rank}", ctx, "0", now)
    return ProbeStatus(info, ProbeState.ALIVE, now, now, Progress(1, now), 0, 0)


JOBS = {
    "01000000": [_probe("01000000", "trainer", r) for r in range(2)],
    "02000000": [_probe("02000000", "actor", r) for r in range(2)]
    + [_probe("02000000", "critic", r) for r in range(2)],
}


def test_a_group_of_one_of_several_live_jobs_selects_that_job_s_ranks():
    found = filter_jobs_by_group(JOBS, "actor")
    assert list(found) == ["02000000"]
    assert [p.context.group for p in found["02000000"]] == ["actor", "actor"]
    assert list(filter_jobs_by_group(JOBS, "train")) == ["01000000"]  # a unique prefix


def test_no_group_keeps_every_job_whole():
    assert filter_jobs_by_group(JOBS, None) == JOBS


def test_a_group_no_live_job_has_is_one_line_naming_the_groups_there_are():
    with pytest.raises(UserError) as raised:
        filter_jobs_by_group(JOBS, "rollout")
    message = str(raised.value)
    assert "\n" not in message and "--group rollout" in message
    assert "actor, critic, trainer" in message and "--job" in message


def test_one_job_keeps_its_own_message():
    with pytest.raises(UserError, match="matches no group of this job"):
        filter_jobs_by_group({"01000000": JOBS["01000000"]}, "actor")


def test_an_actor_that_inherited_a_verl_workers_rank_variable_is_shown_without_a_rank():
    """verl gives each worker RANK in its env_vars; an actor the worker starts inherits them."""
    import dataclasses

    from rankscope.runtime.selection import select_jobs

    def source(p: ProbeStatus, how: str, pid: int) -> ProbeStatus:
        ctx = dataclasses.replace(p.context, rank_source=how, pid=pid)
        info = dataclasses.replace(p.info, probe_id=f"{p.info.probe_id}-{pid}", context=ctx)
        return dataclasses.replace(p, info=info)

    workers = [source(_probe("03000000", "g", r), "torch.distributed", 10 + r) for r in range(2)]
    helper = source(_probe("03000000", "g", 1), "env", 99)
    starting = source(_probe("03000000", "other", 0), "env", 98)  # before its init_process_group
    [job] = select_jobs([*workers, helper, starting], "03000000").values()
    labels = {p.context.pid: p.context.label for p in job}
    assert labels == {10: "rank 0", 11: "rank 1", 99: "pid 99@host", 98: "rank 0"}
    dead = [dataclasses.replace(workers[1], state=ProbeState.DEAD)]
    [job] = select_jobs([*dead, helper], "03000000").values()
    assert {p.context.pid: p.context.label for p in job}[99] == "rank 1"  # no live holder
