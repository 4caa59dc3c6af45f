"""The runtime on a real cluster: hub loss, dead workers, zero-code install."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import ray
from rich.console import Console
from typer.testing import CliRunner

import rankscope.cli.main as cli
from helpers.cluster import cluster_address, probes_by_pid, wait_registered
from helpers.workers import GlooRank, wait_until
from rankscope.config import Config
from rankscope.context import RankContext
from rankscope.events.render import describe_event, render_events
from rankscope.runtime.hub import find_hub
from rankscope.runtime.protocol import ProbeInfo, ProbeState, ProbeStatus, Progress
from rankscope.status.render import render_status


def test_workers_keep_training_when_the_hub_dies_and_reregister_with_a_new_one(cluster):
    actor = ray.remote(num_cpus=0)(GlooRank)
    workers = [actor.remote(r, 2, explicit_rank=True) for r in range(2)]
    pids = ray.get([w.pid.remote() for w in workers])
    wait_registered(pids)
    training = [w.train.remote(300, 0.02) for w in workers]  # about 6 s of steps

    old_hub = find_hub()
    ray.kill(old_hub)
    killed_at = time.time()
    wait_registered(pids, timeout=30)  # with a new hub: the old one answers nothing
    reregistered_after = time.time() - killed_at

    assert ray.get(training, timeout=60) == [300, 300]  # training never stopped or failed
    steps = {pid: p.progress.step for pid, p in probes_by_pid(pids).items()}
    assert all(s > 0 for s in steps.values()), steps
    heartbeat = Config.from_env().heartbeat_interval
    assert reregistered_after < 40 * heartbeat, f"re-registered after {reregistered_after:.1f}s"
    for w in workers:
        ray.kill(w)


def test_status_shows_a_killed_worker_as_dead_within_the_deadline(cluster):
    worker = ray.remote(num_cpus=0)(GlooRank).remote(0, 1, explicit_rank=True)
    pid = ray.get(worker.pid.remote())
    wait_registered([pid])

    os.kill(pid, signal.SIGKILL)
    killed_at = time.time()
    wait_until(
        lambda: probes_by_pid([pid])[pid].state == ProbeState.DEAD,
        timeout=20,
        what="the hub to mark the killed worker dead",
    )
    noticed_after = time.time() - killed_at

    # --job: an earlier test's job may still be live, and a live job hides a finished one
    own_job = ray.get_runtime_context().get_job_id()
    result = CliRunner().invoke(cli.app, ["status", "--job", own_job, "--json"])
    assert result.exit_code == 1  # a dead rank is a finding
    jobs = json.loads(result.output)["data"].values()
    rows = [p for job in jobs for p in job["processes"]]
    mine = [r for r in rows if r["info"]["context"]["pid"] == pid]
    assert mine and mine[0]["state"] == "dead"
    causes = [
        job["deaths"][mine[0]["info"]["probe_id"]]
        for job in jobs
        if mine[0]["info"]["probe_id"] in job["deaths"]
    ]
    assert causes and "Ray: worker died" in causes[0]
    config = Config.from_env()
    assert noticed_after < config.dead_after + config.command_deadline + 2.0


def test_setup_hook_registers_workers_of_another_job_whose_code_never_imports_rankscope(
    cluster,
):
    job = subprocess.Popen(
        [
            sys.executable,
            os.path.join(os.path.dirname(__file__), "plain_job.py"),
            cluster_address(),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert job.stdout is not None
        pid_text, job_id = job.stdout.readline().split()
        pid = int(pid_text)
        wait_registered([pid])
        # the hook runs before the actor exists; the probe re-registers once it does
        status = wait_until(
            lambda: (s := probes_by_pid([pid])[pid]).context.actor_class == "PlainWorker" and s,
            timeout=10,
            what="the probe to learn its actor class",
        )
        assert status.context.job_id == job_id != ray.get_runtime_context().get_job_id()
        # the registry is keyed by job: that job shows its worker and nothing of ours
        result = CliRunner().invoke(cli.app, ["status", "--job", job_id, "--json"])
        rows = json.loads(result.output)["data"][job_id]["processes"]
        assert [r["info"]["context"]["pid"] for r in rows if r["state"] == "alive"] == [pid]
    finally:
        job.communicate(timeout=60)


def test_exchange_through_the_hub_between_actors_with_no_process_group(cluster):
    actor = ray.remote(num_cpus=0)(GlooRank)
    ranks = [actor.remote(r, 3, explicit_rank=True) for r in range(3)]

    together = ray.get([r.exchange.remote("all-three", [0, 1, 2], 30.0) for r in ranks])
    one_absent = ray.get([r.exchange.remote("rank-2-absent", [0, 1, 2], 1.0) for r in ranks[:2]])

    for result in together:
        assert result.payloads == {0: {"rank": 0}, 1: {"rank": 1}, 2: {"rank": 2}}
        assert result.missing == ()
    for result in one_absent:
        assert set(result.payloads) == {0, 1} and result.missing == (2,)
    for r in ranks:
        ray.kill(r)


def test_events_a_rank_reports_can_be_read_back_from_the_cli(cluster):
    worker = ray.remote(num_cpus=0)(GlooRank).remote(7, 8, explicit_rank=True)
    pid = ray.get(worker.pid.remote())
    wait_registered([pid])

    ray.get(worker.note.remote("hello from rank 7"))

    def listed():
        result = CliRunner().invoke(cli.app, ["events", "--kind", "test.", "--json"])
        assert result.exit_code == 0, result.output
        rows = [e for job in json.loads(result.output)["data"].values() for e in job]
        return [e for e in rows if e["payload"] == {"summary": "hello from rank 7"}]

    [event] = wait_until(listed, timeout=15, what="the event in the run directory")
    ray.kill(worker)
    assert event["kind"] == "test.note" and event["who"] == "rank 7"


# What `status` and `events` print, on records as the hub returns them (no cluster needed).

NOW = 1_700_000_000.0


def _probe(
    rank: int | None,
    pid: int,
    actor: str | None,
    node_ip: str = "192.0.2.117",
    state: ProbeState = ProbeState.ALIVE,
) -> ProbeStatus:
    ctx = RankContext(
        rank, rank, 4 if rank is not None else None, "ab" * 28, node_ip, "vm", pid,
        "02000000", "cd" * 16, actor, None, "env" if rank is not None else "none",
    )  # fmt: skip
    return ProbeStatus(
        ProbeInfo(f"probe-{pid}", ctx, "0.1.0", NOW - 600),
        state,
        NOW - 600,
        NOW - 0.4 if state == ProbeState.ALIVE else NOW - 75,
        Progress(12, NOW - 3.2),
        0,
        0,
    )


def _verl_job() -> list[ProbeStatus]:
    """verl on one node: its driver-side TaskRunner (no rank) and four ranks."""
    return [
        _probe(None, 25748, "TaskRunner", state=ProbeState.DEAD),
        *(_probe(r, 25800 + r, "verl_workers_ActorRolloutRefWorker") for r in range(3)),
        _probe(3, 25803, "verl_workers_ActorRolloutRefWorker", "198.51.100.203"),
    ]


def _text(renderable: object, width: int = 80) -> list[str]:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return [line.rstrip() for line in console.export_text().splitlines()]


def test_status_at_80_columns_shows_whole_node_ips_and_actor_classes():
    lines = _text(render_status("02000000", _verl_job(), {"probe-25748": "ray.kill"}, now=NOW))
    assert lines == [
        "job 02000000: 5 processes, rankscope 0.1.0 (seen, stepped: seconds ago)",
        "rank  node              pid  actor                   state  seen   step  stepped",
        "────────────────────────────────────────────────────────────────────────────────",
        "   0  192.0.2.117     25800  verl_workers_ActorRoll  alive  0.4s     12  3.2s",
        "                             outRefWorker",
        "   1  192.0.2.117     25801  verl_workers_ActorRoll  alive  0.4s     12  3.2s",
        "                             outRefWorker",
        "   2  192.0.2.117     25802  verl_workers_ActorRoll  alive  0.4s     12  3.2s",
        "                             outRefWorker",
        "   3  198.51.100.203  25803  verl_workers_ActorRoll  alive  0.4s     12  3.2s",
        "                             outRefWorker",
        "",
        "   -  192.0.2.117     25748  TaskRunner              dead   1m15s    12  3.2s",
        "pid 25748@vm (TaskRunner) died: ray.kill",
    ]  # processes without a rank come after the ranks, apart


def test_status_at_80_columns_cuts_nothing_short_even_when_crowded():
    probes = [
        _probe(None, 2574812, "TrainController", "203.0.113.254", ProbeState.UNRESPONSIVE),
        _probe(12, 2574899, "RayTrainWorker", "198.51.100.203", ProbeState.DEAD),
    ]
    assert _text(render_status("02000000", probes, now=NOW))[1:] == [
        "rank  node                pid  actor          state         seen   step  stepped",
        "────────────────────────────────────────────────────────────────────────────────",
        "  12  198.51.100.203  2574899  RayTrainWorke  dead          1m15s    12  3.2s",
        "                               r",
        "",
        "   -  203.0.113.254   2574812  TrainControll  unresponsive  1m15s    12  3.2s",
        "                               er",
    ]  # the actor class folds rather than losing its end; the IPs stay whole


def test_status_shows_a_version_column_only_when_versions_differ():
    probes = _verl_job()
    probes[1] = dataclasses.replace(
        probes[1], info=dataclasses.replace(probes[1].info, version="0.0.9")
    )
    lines = _text(render_status("02000000", probes, now=NOW), width=120)
    assert lines[0] == "job 02000000: 5 processes (seen, stepped: seconds ago)"
    assert lines[1].split()[-1] == "version" and lines[3].split()[-1] == "0.0.9"


def test_status_death_line_names_a_process_without_a_rank_once():
    probes = [*_verl_job(), _probe(2, 25900, "RayTrainWorker", state=ProbeState.DEAD)]
    deaths = {"probe-25748": "killed by ray.kill", "probe-25900": "exited: SIGKILL"}
    lines = _text(render_status("02000000", probes, deaths, now=NOW), width=120)
    assert lines[-2:] == [
        "rank 2 (pid 25900) died: exited: SIGKILL",
        "pid 25748@vm (TaskRunner) died: killed by ray.kill",
    ]


def _in_group(probe: ProbeStatus, group: str) -> ProbeStatus:
    context = dataclasses.replace(probe.info.context, group=group)
    return dataclasses.replace(probe, info=dataclasses.replace(probe.info, context=context))


def test_status_with_two_groups_shows_the_group_and_the_first_death():
    """verl: an actor group and a critic group, each with ranks 0-1, in one job."""
    actor = [_in_group(_probe(r, 100 + r, "Actor"), "10.0.0.1:29500") for r in range(2)]
    critic = [_in_group(_probe(r, 200 + r, "Critic"), "10.0.0.1:29600") for r in range(2)]
    first = "rank 1 died first: Ray: worker died"
    lines = _text(render_status("02000000", [*critic, *actor], first_death=first, now=NOW), 120)
    assert lines[1].split()[:2] == ["group", "rank"]
    assert [line.split()[:3] for line in lines[3:7]] == [
        ["10.0.0.1:29500", "0", "192.0.2.117"],
        ["10.0.0.1:29500", "1", "192.0.2.117"],
        ["10.0.0.1:29600", "0", "192.0.2.117"],
        ["10.0.0.1:29600", "1", "192.0.2.117"],
    ]
    assert lines[-1] == "first: rank 1 died first: Ray: worker died"


def _hang_report_event(findings: list[str]) -> dict[str, object]:
    """A `hang_report` event as rank 0's watchdog sends it (hang/worker_watchdog.py) and
    `job_events` returns it."""
    return {
        "kind": "hang_report",
        "time": NOW,
        "probe_id": "probe-25800",
        "who": "rank 0",
        "payload": {
            "path": "/tmp/ray/rankscope/02000000/hang-report-20260101-120000.json",
            "reason": "all_reduce #3 in group 0 has run for 301 s (at train.py:88)",
            "findings": findings,
        },
    }


def test_events_show_a_hang_reports_findings_not_only_the_writers_reason():
    finding = (
        "group 0 (4 ranks): ranks 0,1,3 wait in all_reduce #3 (float32[4]) for 301.0 s; "
        "rank 2 never entered #3, its last completed collective is #2; "
        "rank 2 is in load_batch data.py:41"
    )
    note = {"kind": "test.note", "time": NOW, "who": "rank 7", "payload": {"summary": "hi"}}
    lines = _text(render_events("02000000", [_hang_report_event([finding]), note]), width=100)
    clock = time.strftime("%H:%M:%S", time.localtime(NOW))
    empty = "│          │        │             │ "
    assert [line.rstrip("│ ") for line in lines[4:]] == [
        f"│ {clock} │ rank 0 │ hang_report │ group 0 (4 ranks): ranks 0,1,3 wait in all_reduce #3",
        f"{empty}(float32[4]) for 301.0 s; rank 2 never entered #3, its last",
        f"{empty}completed collective is #2; rank 2 is in load_batch data.py:41",
        f"{empty}(this rank's watchdog: all_reduce #3 in group 0 has run for",
        f"{empty}301 s (at train.py:88); report:",
        f"{empty}/tmp/ray/rankscope/02000000/hang-report-20260101-120000.json)",
        f"│ {clock} │ rank 7 │ test.note   │ hi",
        "└──────────┴────────┴─────────────┴──────────────────────────────────────────────────"
        "──────────────┘",
    ]


def test_a_hang_report_without_findings_says_so():
    event = _hang_report_event([])
    assert describe_event("hang_report", event["payload"]).splitlines() == [
        "no culprit found; this rank's watchdog: all_reduce #3 in group 0 has run for 301 s "
        "(at train.py:88)",
        "report: /tmp/ray/rankscope/02000000/hang-report-20260101-120000.json",
    ]
