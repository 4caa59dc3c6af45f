"""Faults of the cluster on a real multi-node Ray cluster (issue 20): a node removed mid-training,
a frozen (SIGSTOP) rank, the hub killed during a `stacks` fan-out, a full disk under the run
directory. rankscope must not hang, crash or slow the job, and must say what happened.

The session's `cluster` is reused; the node-removal and raylet-kill tests add a third node of
their own and remove it (the session's second node stays). Each test names its own group of
ranks, so the session job's other ranks (earlier tests') never mix in.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
import uuid

import psutil
import ray
from ray._private import ray_constants
from typer.testing import CliRunner

import rankscope.cli.main as cli
from helpers.cluster import probes_by_pid, wait_registered
from helpers.workers import WORKER_NODE_RESOURCE, wait_until
from rankscope.config import Config
from rankscope.hang.collect import whereabouts
from rankscope.runtime.ask import Command, ask
from rankscope.runtime.client import HubClient
from rankscope.runtime.hub import find_hub
from rankscope.runtime.liveness import NODE_SWEEP_S
from rankscope.runtime.protocol import ProbeState

FAULT_NODE = "rs_fault_node"
CONFIG = Config.from_env()
RAY_HEALTH_CHECK_S = 3.0 * 5
"""Ray's GCS declares a node dead after 5 failed health checks 3 s apart (its defaults,
health_check_period_ms and health_check_failure_threshold: GCS-wide, not settable per node)."""


class FaultRank:
    """A rank of a two-rank group that steps (sleeps and counts) until told otherwise."""

    def __init__(self, rank: int, group: str) -> None:
        import rankscope

        rankscope.init(rank=rank, world_size=2, group=group)

    def pid(self) -> int:
        return os.getpid()

    def train(self, seconds: float, interval: float = 0.02) -> int:
        import rankscope

        steps, end = 0, time.time() + seconds
        while time.time() < end:
            time.sleep(interval)
            rankscope.step()
            steps += 1
        return steps

    def note(self, count: int) -> None:
        import rankscope

        probe = rankscope.current_probe()
        assert probe is not None
        for i in range(count):
            probe.emit("test.fault", {"i": i})


def _ranks(group: str, **options: object) -> list:
    actor = ray.remote(num_cpus=0)(FaultRank)
    return [actor.options(**options.get(f"rank{r}", {})).remote(r, group) for r in range(2)]


def _cli(*args: str) -> tuple[int, str, str, float]:
    start = time.monotonic()
    result = CliRunner().invoke(cli.app, list(args))
    return result.exit_code, result.stdout, result.stderr, time.monotonic() - start


def _job() -> str:
    return ray.get_runtime_context().get_job_id()


def _node_gone(pid: int) -> bool:
    """The hub holds the process dead because Ray declared its node dead."""
    found = probes_by_pid([pid]).get(pid)
    return found is not None and found.state == ProbeState.DEAD and "node gone" in found.reason


def test_a_removed_node_s_rank_is_dead_with_its_last_words_and_the_other_answers(cluster):
    node = cluster.add_node(num_cpus=1, resources={FAULT_NODE: 10})
    cluster.wait_for_nodes()
    group = f"fault-node-{uuid.uuid4().hex[:6]}"
    try:
        # the survivor pinned elsewhere: unpinned, a zero-CPU actor may land on the doomed node
        doomed, survivor = _ranks(
            group,
            rank0={"resources": {FAULT_NODE: 1}},
            rank1={"resources": {WORKER_NODE_RESOURCE: 1}},
        )
        pids = ray.get([doomed.pid.remote(), survivor.pid.remote()], timeout=60)
        wait_registered(pids)
        training = survivor.train.remote(40.0)  # still stepping when `stacks` asks, however slow
        doomed.train.remote(600.0)
        time.sleep(3 * CONFIG.heartbeat_interval)  # a few heartbeats of last words
        cluster.remove_node(node)
        node = None
        removed_at = time.time()
        wait_until(
            lambda: _node_gone(pids[0]),
            timeout=CONFIG.dead_after + CONFIG.command_deadline + 20,
            what="the removed node's rank to be seen dead with node gone",
        )
        noticed_after = time.time() - removed_at
        # dead_after, then the liveness check (its task on a gone node fails at once, else
        # command_deadline), plus a reaper tick, heartbeat timing and a loaded machine's slack;
        # the node sweep names the cause as soon as Ray has declared the node dead
        assert noticed_after < CONFIG.dead_after + CONFIG.command_deadline + 5.0, noticed_after

        code, out, err, _ = _cli("status", "--job", _job(), "--group", group, "--json")
        assert code == 1, err  # a dead rank is a finding
        data = json.loads(out)["data"]
        (job,) = data.values()
        dead = [p for p in job["processes"] if p["info"]["context"]["pid"] == pids[0]]
        assert dead and dead[0]["state"] == "dead"
        cause = job["deaths"][dead[0]["info"]["probe_id"]]
        assert cause.startswith("node gone: Ray declared node "), cause
        (alive,) = [p for p in job["processes"] if p["info"]["context"]["pid"] == pids[1]]
        assert alive["state"] == "alive", alive
        assert "train" in (dead[0]["summaries"].get("where") or ""), dead[0]["summaries"]

        code, out, err, took = _cli("stacks", "--job", _job(), "--group", group, "--json")
        assert code in (0, 1), err
        stacks = json.loads(out)["data"][0]
        members = {m["rank"] for g in stacks["groups"] for m in g["members"]}
        assert 1 in members, out  # the survivor answered
        assert took < 10.0, took
        assert ray.get(training, timeout=60) > 100  # it never stopped stepping
    finally:
        if node is not None:
            cluster.remove_node(node)


def test_a_rank_whose_raylet_was_killed_is_dead_with_node_gone_while_it_heartbeats(cluster):
    """SIGKILL a node's raylet: its worker lives on and keeps heartbeating over the connection
    it has, but Ray declares the node dead; the hub's node sweep makes the rank dead with
    "node gone" within Ray's health check, and status and stacks say so, while the rank on
    another node keeps stepping and answering; the hub tells the orphaned probe to stop
    polling (issue 20)."""
    node = cluster.add_node(num_cpus=1, resources={FAULT_NODE: 10})
    cluster.wait_for_nodes()
    raylet = psutil.Process(node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid)
    group = f"fault-raylet-{uuid.uuid4().hex[:6]}"
    doomed, survivor = _ranks(
        group,
        rank0={"resources": {FAULT_NODE: 1}},
        rank1={"resources": {WORKER_NODE_RESOURCE: 1}},
    )
    orphans: list[psutil.Process] = []
    try:
        pid, other = ray.get([doomed.pid.remote(), survivor.pid.remote()], timeout=60)
        wait_registered([pid, other])
        doomed.train.remote(600.0)
        training = survivor.train.remote(RAY_HEALTH_CHECK_S + 20)  # stepping past the verdict
        orphans = raylet.children(recursive=True)  # its workers outlive it: ours to end
        raylet.send_signal(signal.SIGKILL)
        killed_at = time.time()

        wait_until(lambda: _node_gone(pid), timeout=RAY_HEALTH_CHECK_S + 45, what="node gone")
        noticed_after = time.time() - killed_at
        # Ray's health checks, one sweep, then slack for a loaded machine
        assert noticed_after < RAY_HEALTH_CHECK_S + NODE_SWEEP_S + 15, noticed_after
        assert psutil.pid_exists(pid)  # the worker outlived its raylet ...

        code, out, err, _ = _cli("status", "--job", _job(), "--group", group, "--json")
        assert code == 1, err  # a dead rank is a finding
        (job,) = json.loads(out)["data"].values()
        by_pid = {p["info"]["context"]["pid"]: p for p in job["processes"]}
        probe = by_pid[pid]
        assert probe["state"] == "dead" and probe["reason"].startswith("node gone: "), probe
        assert probe["last_seen"] > killed_at  # ... and heartbeated after: dead all the same
        assert by_pid[other]["state"] == "alive", by_pid[other]
        cause = job["deaths"][probe["info"]["probe_id"]]
        assert cause.startswith("node gone: Ray declared node "), cause

        code, out, err, _ = _cli("status", "--job", _job(), "--group", group)
        assert "died: node gone: Ray declared node" in " ".join(out.split()), out
        code, out, err, took = _cli("stacks", "--job", _job(), "--group", group, "--json")
        assert code in (0, 1), err
        (report,) = json.loads(out)["data"]
        (missing,) = report["unanswered"]
        assert missing["reason"].startswith("process is dead (node gone: "), missing
        members = {m["rank"] for g in report["groups"] for m in g["members"]}
        assert members == {1}, report  # the other node's rank answered
        assert took < 10.0, took
        last = probes_by_pid([pid])[pid].last_seen  # told so, the orphan stopped polling
        time.sleep(2.0)
        assert probes_by_pid([pid])[pid].last_seen == last
        assert ray.get(training, timeout=90) > 100  # it never stopped stepping
    finally:
        for process in orphans:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(signal.SIGKILL)
        cluster.remove_node(node, allow_graceful=False)


def test_a_frozen_rank_and_a_hub_killed_mid_fan_out(cluster):
    """SIGSTOP one rank: it is unresponsive, its stack comes from py-spy, and the other's answer
    waits for nothing. Then kill the hub while `stacks` waits for the frozen rank: one line,
    exit 2, within the deadline; the training rank never notices and both
    ranks register with the new hub."""
    group = f"fault-stop-{uuid.uuid4().hex[:6]}"
    ranks = _ranks(group)
    pids = ray.get([r.pid.remote() for r in ranks], timeout=60)
    wait_registered(pids)
    training = ranks[0].train.remote(40.0)
    os.kill(pids[1], signal.SIGSTOP)
    try:
        wait_until(
            lambda: probes_by_pid(pids[1:])[pids[1]].state == ProbeState.UNRESPONSIVE,
            timeout=CONFIG.dead_after + CONFIG.command_deadline + 10,
            what="the frozen rank to be seen unresponsive",
        )
        code, out, err, took = _cli(
            "stacks", "--job", _job(), "--group", group, "--deadline", "2", "--json"
        )
        assert code in (0, 1), err
        report = json.loads(out)["data"][0]
        sources = {m["rank"]: m["source"] for g in report["groups"] for m in g["members"]}
        assert sources.get(0) == "probe", report
        assert sources.get(1) == "py-spy", report  # taken from outside: it is frozen
        assert took < 2 + 15, took  # the deadline, then one py-spy, never the frozen rank

        # `hang` asks only where each rank is: the frozen rank's answer comes from py-spy too
        client = HubClient.attach()
        members = [p for p in client.probes(_job()) if p.context.group == group]
        located, kids = ask(client, members, [Command("where"), Command("children")], 2.0)
        where = whereabouts(located, kids)
        by_rank = {p.context.rank: where.get(p.info.probe_id) for p in members}
        assert "train test_faults_cluster.py:" in (by_rank[0] or ""), by_rank  # its own answer
        assert by_rank[1], by_rank  # py-spy's, as for `stacks`

        # the hub killed while `stacks` waits out its deadline for the frozen rank
        hub = find_hub()
        assert hub is not None
        probes = [p for p in HubClient.attach().probes(_job()) if p.context.group == group]
        killer = threading.Timer(1.0, ray.kill, args=(hub,), kwargs={"no_restart": False})
        killer.start()
        code, out, err, took = _cli("stacks", "--job", _job(), "--group", group, "--deadline", "6")
        killer.join()
        assert code == 2, (out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "hub" in lines[0], err
        assert took < 6 + 4, took  # the deadline and a loaded machine's slack, no restart wait
        assert len(probes) == 2
    finally:
        os.kill(pids[1], signal.SIGCONT)
    wait_registered(pids, timeout=40)  # both, with the hub Ray restarted
    assert ray.get(training, timeout=60) > 500  # the training rank never stopped


def _hub_pid() -> int:
    from ray._private import state

    hub = find_hub()
    assert hub is not None
    return int(state.actors(hub._actor_id.hex())["Pid"])


def test_a_full_disk_drops_and_counts_events_and_warns_once(cluster, hub):
    """events.jsonl made a link to /dev/full: every write fails with the kernel's ENOSPC."""
    from ray._private.worker import _global_node

    client = HubClient.attach()
    run_dir = client.info().run_dir
    job_dir = os.path.join(run_dir, _job())
    events = os.path.join(job_dir, "events.jsonl")
    os.makedirs(job_dir, exist_ok=True)
    saved = events + ".saved"
    if os.path.lexists(events):
        os.replace(events, saved)
    os.symlink("/dev/full", events)
    try:
        group = f"fault-disk-{uuid.uuid4().hex[:6]}"
        ranks = _ranks(group)
        pids = ray.get([r.pid.remote() for r in ranks], timeout=60)
        wait_registered(pids)
        before = client.info().dropped_events
        training = [r.train.remote(3.0) for r in ranks]
        ray.get([r.note.remote(50) for r in ranks], timeout=30)
        wait_until(
            lambda: client.info().dropped_events >= before + 100,
            timeout=15,
            what="the hub to count the events the disk refused",
        )
        assert all(s > 50 for s in ray.get(training, timeout=30))  # no exception, no stall
        ray.get([r.note.remote(10) for r in ranks], timeout=30)  # a second batch: no new warning
        wait_until(lambda: client.info().dropped_events >= before + 120, timeout=15)
        logs = os.path.join(_global_node.get_session_dir_path(), "logs")
        pid = _hub_pid()
        text = "".join(
            open(os.path.join(logs, name), errors="replace").read()  # noqa: SIM115
            for name in os.listdir(logs)
            if name.startswith("worker-") and name.endswith(f"-{pid}.err")
        )
        assert text.count("cannot write events") == 1, text[-2000:]
        assert "No space left on device" in text
    finally:
        os.unlink(events)
        if os.path.lexists(saved):
            os.replace(saved, events)
