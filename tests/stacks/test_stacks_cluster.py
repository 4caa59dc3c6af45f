"""`rankscope stacks` on real gloo ranks in Ray actors, across two nodes."""

from __future__ import annotations

import json
import re
import time

import pytest
import ray
from typer.testing import CliRunner, Result

import rankscope.cli.main as cli
from helpers.cluster import (
    cluster_address,
    line_of,
    probes_by_pid,
    run_cli,
    seen_in,
    wait_registered,
)
from helpers.workers import (
    WORKER_NODE_RESOURCE,
    GlooRank,
    form_group,
    spin_holding_the_gil,
    wait_for_data,
    wait_until,
)
from rankscope.runtime.protocol import ProbeState
from rankscope.stacks.analysis import LONG_WAIT_S


def _four_ranks() -> tuple[list, list[int], list[str]]:
    """Ranks 0-2 on the head node, rank 3 on the second node, one gloo group."""
    actor = ray.remote(num_cpus=0)(GlooRank)
    on_head = actor.options(resources={"node:__internal_head__": 0.01})
    actors = [on_head.remote(r, 4) for r in range(3)]
    actors.append(actor.options(resources={WORKER_NODE_RESOURCE: 1}).remote(3, 4))
    form_group(actors)
    pids = ray.get([a.pid.remote() for a in actors])
    node_ids = ray.get([a.node_id.remote() for a in actors])
    wait_registered(pids, ranked=True)
    return actors, pids, node_ids


@pytest.fixture
def four_ranks(cluster):
    actors, pids, node_ids = _four_ranks()
    yield actors, pids, node_ids
    for a in actors:
        ray.kill(a)


@pytest.fixture(scope="module")
def stalled(cluster, tmp_path_factory):
    """The four ranks' all_reduce, which rank 3 skips: it waits in its own code for a file
    while ranks 0-2 wait in all_reduce, for as long as the tests of this file look at it.
    Then rank 3 returns once the file is there."""
    actors, pids, node_ids = _four_ranks()
    release = tmp_path_factory.mktemp("stall") / "release"
    running = [a.step_once.remote(str(release) if r == 3 else None) for r, a in enumerate(actors)]
    yield actors, pids, node_ids
    release.write_text("go")
    ray.get(running[3], timeout=30)
    # rank 3 skipped its all_reduce, so the others stay blocked until killed: that is the hang
    for a in actors:
        ray.kill(a)


def _stacks_of_this_job(*args: str) -> Result:
    """`rankscope stacks` in this process, on this driver's job: other jobs' ranks 0-3 (the
    subprocess jobs of tests that ran before, in this pytest process) stay out."""
    job = ray.get_runtime_context().get_job_id()
    return CliRunner().invoke(cli.app, ["stacks", "--job", job, *args])


def _wait_in_all_reduce(pids: list[int]) -> None:
    """Until every pid's probe says (in its heartbeat) that it is in all_reduce."""

    def there() -> bool:
        found = probes_by_pid(pids)
        return all("all_reduce" in (found[p].summaries.get("where") or "") for p in found) and (
            len(found) == len(pids)
        )

    wait_until(there, timeout=30, what=f"pids {pids} to wait in all_reduce")


def test_stacks_groups_the_waiting_ranks_and_names_the_one_that_never_joined(stalled):
    _, pids, _ = stalled
    _wait_in_all_reduce(pids[:3])

    result = run_cli("stacks", "--address", cluster_address(), "--ranks", "0-3")

    assert result.returncode == 1, result.stderr  # ranks stuck for a rank elsewhere: a finding
    waiting = seen_in(wait_for_data, "workers.py")
    reduce_line = line_of(GlooRank.step_once, "dist.all_reduce")
    out = result.stdout
    assert re.search(f"rank 3: {waiting}", out), out
    assert f"ranks 0-2: all_reduce <- step_once workers.py:{reduce_line}" in out
    # the odd one out comes first, and the one-line finding says it all
    assert re.search(f"rank 3: {waiting}.*ranks 0-2: all_reduce", out, re.DOTALL)
    assert "rankscope-" not in out  # our own threads (probe, watchdog) are never shown
    assert re.search(
        f"ranks 0-2 wait in all_reduce <- step_once workers.py:{reduce_line}; "
        f"rank 3 is elsewhere: {waiting}",
        " ".join(out.split()),
    )


def test_stacks_json_has_every_rank_with_node_and_pid(stalled):
    _, pids, node_ids = stalled
    _wait_in_all_reduce(pids[:3])

    result = _stacks_of_this_job("--json", "--ranks", "0-3")

    assert result.exit_code == 1, result.output  # the finding below
    doc = json.loads(result.output)
    assert doc["schema_version"] == 1 and doc["command"] == "stacks"
    [finding] = doc["data"][0]["findings"]
    assert finding["waiting"] == [0, 1, 2] and finding["elsewhere"] == [3]
    assert "rank 3 is elsewhere: wait_for_data workers.py:" in finding["message"]
    assert doc["data"][0]["ok"] is False
    groups = [g for g in doc["data"][0]["groups"] if not all(f["library"] for f in g["frames"])]
    members = {m["pid"]: m for g in groups for m in g["members"]}
    assert set(pids) <= set(members)
    assert {members[p]["rank"] for p in pids} == {0, 1, 2, 3}
    expected = dict(zip(pids, node_ids, strict=True))
    assert {p: members[p]["node_id"] for p in pids} == expected
    assert len(set(node_ids)) == 2  # two nodes


def test_ranks_that_waited_long_are_a_finding_in_one_look(stalled):
    """The waiting ranks' recorders say since when they wait, in every heartbeat and answer:
    past LONG_WAIT_S the finding needs no second look, and the JSON says how long each waited."""
    _, pids, _ = stalled

    def waited_long() -> bool:
        found = probes_by_pid(pids[:3]).values()
        since = [p.progress.waiting_since for p in found]
        return len(since) == 3 and all(
            s is not None and time.time() - s > LONG_WAIT_S + 0.5 for s in since
        )

    wait_until(waited_long, timeout=60, what="ranks 0-2 to wait in all_reduce for 5 s")

    result = _stacks_of_this_job("--json", "--ranks", "0-3")

    assert result.exit_code == 1, result.output
    [data] = json.loads(result.output)["data"]
    [finding] = data["findings"]
    assert (finding["waiting"], finding["elsewhere"], data["looks"]) == ([0, 1, 2], [3], 1)
    waited = {m["rank"]: m["waited_s"] for g in data["groups"] for m in g["members"] if m["active"]}
    assert all(waited[r] >= LONG_WAIT_S for r in (0, 1, 2)), waited
    assert waited[3] is None  # it never entered the all_reduce


def test_ranks_in_different_places_while_they_step_are_no_finding(four_ranks):
    """A training loop of all_reduces and steps: a snapshot catches ranks in different places
    (one in all_reduce, one between steps); every rank makes progress, so exit 0."""
    actors, pids, _ = four_ranks
    training = [a.reduce_steps.remote(100_000) for a in actors]
    wait_until(
        lambda: all(p.progress.step > 5 for p in probes_by_pid(pids).values()),
        timeout=30,
        what="the ranks to step",
    )
    group = str(probes_by_pid(pids)[pids[0]].context.group)  # not the stalled ranks 0-3

    result = _stacks_of_this_job("--json", "--group", group, "--ranks", "0-3")

    for a in actors:
        ray.kill(a)  # ends the loop (the fixture kills them again, harmlessly)
    ray.wait(training, num_returns=len(training), timeout=30)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["data"][0]["findings"] == []


def test_unresponsive_probe_falls_back_to_py_spy_on_the_process_node(cluster):
    actor = ray.remote(num_cpus=0)(GlooRank).options(resources={WORKER_NODE_RESOURCE: 1})
    spinner = actor.remote(5, 8, explicit_rank=True)
    pid = ray.get(spinner.pid.remote())
    wait_registered([pid])
    spinner.spin.remote()  # holds the GIL: the probe thread cannot run
    wait_until(
        lambda: probes_by_pid([pid])[pid].state == ProbeState.UNRESPONSIVE,
        timeout=20,
        what="the hub to mark the spinning rank unresponsive",
    )

    result = run_cli("stacks", "--address", cluster_address(), "--ranks", "5", "--deadline", "1")

    ray.kill(spinner)
    assert result.returncode == 0, result.stderr
    spin_line = line_of(spin_holding_the_gil, "re.match")
    out = " ".join(result.stdout.split())
    assert (
        f"rank 5: match <- spin_holding_the_gil workers.py:{spin_line} [MainThread; via py-spy]"
        in out
    )
    assert "unresponsive: rank 5 (probe did not answer within 1s); stack taken with py-spy" in out
    assert "rankscope-" not in out  # our own threads (probe, watchdog) are never shown
