"""Job-scoped alert rules on the real cluster: an ERROR burst no rank reaches alone is raised
by the job's judge (rank 0) naming the ranks that contributed and POSTed to a local webhook;
with rank 0 killed, the lowest live rank judges instead (the judge's fallback);
`rankscope alerts --ack all` (real CLI) acknowledges them: exit 0 from then on."""

from __future__ import annotations

import json
import time
import uuid

import ray

from helpers.cluster import (
    GLOO_JOB,
    cluster_address,
    probes_by_pid,
    run_cli,
    wait_registered,
    webhook_server,
)
from helpers.workers import WORKER_NODE_RESOURCE, wait_until
from helpers.workers_logs import LogRank
from rankscope.runtime.protocol import ProbeState


def test_a_job_wide_error_burst_names_its_ranks_and_rank_1_judges_once_rank_0_is_dead(cluster):
    group = f"jobwide-{uuid.uuid4().hex[:6]}"
    with webhook_server() as (url, posted):
        env = {
            "RANKSCOPE_ALERT_ERROR_BURST_SCOPE": "job",
            "RANKSCOPE_ALERT_ERROR_BURST": "6",
            "RANKSCOPE_ALERT_ERROR_WINDOW_S": "20",
        }
        actor = ray.remote(num_cpus=0)(LogRank)
        env_opts = {"runtime_env": {"env_vars": env}}
        worker_node = {WORKER_NODE_RESOURCE: 1}
        ranks = [
            actor.options(**env_opts).remote(0, 3, webhook=url, group=group),
            actor.options(**env_opts).remote(1, 3, webhook=url, group=group),
            actor.options(**env_opts, resources=worker_node).remote(2, 3, webhook=url, group=group),
        ]
        try:
            pids = ray.get([r.pid.remote() for r in ranks], timeout=120)
            wait_registered(pids, ranked=True)
            ray.get([ranks[1].errors.remote(3), ranks[2].errors.remote(3)], timeout=30)

            def bursts() -> list[dict]:
                return [b for b in posted if b["rule"] == "error_burst"]

            (first,) = wait_until(bursts, timeout=30, what="the job-wide burst's POST")
            assert (first["scope"], first["rank"], first["pid"]) == ("job", None, pids[0])
            assert (
                "6 ERROR records in 20 s from ranks 1,2 (rank 1: 3, rank 2: 3)"
                in (first["message"])
            ), first
            ray.kill(ranks[0])
            wait_until(
                lambda: probes_by_pid(pids)[pids[0]].state != ProbeState.ALIVE,
                timeout=30,
                what="rank 0's probe no longer alive at the hub",
            )
            time.sleep(1.0)
            ray.get([ranks[1].errors.remote(3), ranks[2].errors.remote(3)], timeout=30)
            wait_until(lambda: len(bursts()) >= 2, timeout=30, what="rank 1's judging")
            assert [b["pid"] for b in bursts()] == [pids[0], pids[1]], bursts()
            assert all(b["scope"] == "job" for b in bursts())

            job = ["--address", cluster_address(), "--job", ray.get_runtime_context().get_job_id()]
            bad = run_cli("alerts", *job, "--ack", "no_such_rule")
            assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
            acked = run_cli("alerts", *job, "--ack", "all", "--json")
            (listed,) = json.loads(acked.stdout)["data"]
            assert acked.returncode == 0 and listed["alerts"], acked.stderr
            assert all(a["acked"] and not a["active"] for a in listed["alerts"]), listed
            wait_until(  # the acknowledgement is in the run directory: a later call sees it
                lambda: run_cli("alerts", *job).returncode == 0,
                timeout=30,
                what="`rankscope alerts` exit 0 after --ack all",
            )
        finally:
            for r in ranks:
                ray.kill(r)


def test_a_rank_killed_in_a_group_torn_down_after_it_is_raised_by_the_hub(cluster, hub):
    """SIGKILL one rank, then its driver ends and Ray kills the others within a second, as a
    controller does: no rank lives to judge, and the hub raises the first death alone."""
    import os
    import signal
    import subprocess
    import sys

    from rankscope.runtime.client import HubClient

    driver = subprocess.Popen(
        [sys.executable, GLOO_JOB, cluster_address()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert driver.stdout is not None and driver.stdin is not None
    job = driver.stdout.readline().strip()
    client = HubClient.attach(cluster_address())
    ranks = wait_until(
        lambda: (
            {p.context.rank: p for p in client.probes(job) if p.context.rank is not None}
            if len({p.context.rank for p in client.probes(job)} - {None}) == 4
            else None
        ),
        what="the job's four ranks",
    )
    os.kill(ranks[1].context.pid, signal.SIGKILL)
    time.sleep(0.5)
    driver.stdin.close()  # the driver ends: Ray kills the ranks it owns
    driver.wait(timeout=60)

    def deaths() -> list[dict]:
        return [e["payload"] for e in client.events(job, ["alert"], 50)
                if e["payload"].get("rule") == "death"]  # fmt: skip

    wait_until(lambda: len(client.probes(job)) and all(
        p.state == ProbeState.DEAD for p in client.probes(job) if p.context.rank is not None
    ), timeout=60, what="every rank dead")  # fmt: skip
    [death] = wait_until(deaths, timeout=20, what="the hub's death alert")
    assert death["rank"] == 1 and death["severity"] == "critical"
    assert death["message"].startswith(f"rank 1 died (pid {ranks[1].context.pid} on ")
    time.sleep(1.0)
    assert len(deaths()) == 1  # the ranks the teardown killed followed it: no alert each


def test_a_job_that_ends_raises_no_death_alert_for_the_ranks_ray_ends_with_it(cluster, hub):
    """The driver ends and Ray ends the actors it owns: a normal job end, no death to raise."""
    import subprocess
    import sys

    from rankscope.runtime.client import HubClient

    driver = subprocess.Popen(
        [sys.executable, GLOO_JOB, cluster_address()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert driver.stdout is not None and driver.stdin is not None
        job = driver.stdout.readline().strip()
        assert job, "the gloo job's driver printed no job id"
        client = HubClient.attach(cluster_address())
        wait_until(
            lambda: len({p.context.rank for p in client.probes(job)} - {None}) == 4,
            timeout=60,
            what="the job's four ranks",
        )
        driver.stdin.close()
        driver.wait(timeout=60)
    finally:
        if driver.poll() is None:  # never leave a live job to the tests after this one
            driver.kill()
            driver.wait(timeout=30)
    wait_until(lambda: len(client.probes(job)) and all(
        p.state == ProbeState.DEAD for p in client.probes(job) if p.context.rank is not None
    ), timeout=60, what="every rank dead")  # fmt: skip
    time.sleep(2.0)  # the hooks ran as each was marked dead
    alerts = [e["payload"] for e in client.events(job, ["alert"], 50)]
    assert not [a for a in alerts if a.get("rule") == "death"], alerts
