"""`rankscope level off` on a live gloo job: the switched rank stops recording collectives (its
heartbeat summary carries none, `rankscope hang` names it as at level off) while the other rank
goes on and its heartbeat keeps coming; `rankscope level light` resumes it, aligned."""

from __future__ import annotations

import json
import time

import ray
from typer.testing import CliRunner

import rankscope.cli.main as cli
from helpers.cluster import probes_by_pid, wait_registered
from helpers.workers import WORKER_NODE_RESOURCE, GlooRank, form_group, wait_until
from rankscope.hang.model import RecorderSnapshot
from rankscope.runtime.client import HubClient


def _cli(*args: str) -> tuple[int, object]:
    """The real CLI in this process (it joins the session cluster), `--json` parsed."""
    result = CliRunner().invoke(cli.app, [*args, "--json"])
    return result.exit_code, json.loads(result.output)["data"]


def _summaries(pids: list[int]) -> list[RecorderSnapshot | None]:
    """Each rank's `collectives` heartbeat summary, as the hub holds it now."""
    found = probes_by_pid(pids)
    return [found[p].summaries.get("collectives") if p in found else None for p in pids]


def _last_seq(snapshot: RecorderSnapshot | None) -> int:
    return -1 if snapshot is None else max((r.seq for r in snapshot.records), default=0)


def test_live_off_stops_recording_on_one_rank_and_light_resumes_it(cluster, tmp_path):
    actor = ray.remote(num_cpus=0)(GlooRank)
    actors = [
        actor.remote(0, 2),
        actor.options(resources={WORKER_NODE_RESOURCE: 1}).remote(1, 2),
    ]
    try:
        form_group(actors)
        pids = ray.get([a.pid.remote() for a in actors])
        wait_registered(pids, ranked=True)
        group = ["--group", str(probes_by_pid(pids)[pids[0]].context.group)]
        ray.get([a.reduce_steps.remote(3) for a in actors], timeout=60)
        before = wait_until(
            lambda: (s := _summaries(pids)) and all(x and _last_seq(x) >= 3 for x in s) and s,
            what="both ranks' collectives in their summaries",
        )
        start = _last_seq(before[0])

        code, rows = _cli("level", "off", "--ranks", "1", *group)
        assert code == 0 and [(r["rank"], r["state"]["level"]) for r in rows] == [(1, "off")]
        ray.get([a.reduce_steps.remote(5) for a in actors], timeout=60)
        switched = time.time()
        off = wait_until(
            lambda: (s := _summaries(pids)) and _last_seq(s[0]) >= start + 5 and s,
            what="rank 0's summary to show the calls made meanwhile",
        )
        assert off[1].paused and off[1].records == ()  # rank 1: nothing recorded nor sent
        assert not off[0].paused
        where = {p: s.summaries.get("where") for p, s in probes_by_pid(pids).items()}
        assert where[pids[1]] is None and where[pids[0]] is not None  # no stack per heartbeat
        wait_until(
            lambda: probes_by_pid(pids)[pids[1]].last_seen > switched,
            what="rank 1's heartbeat after the switch",
        )
        ring = HubClient.attach().fan_out("collectives", [probes_by_pid(pids)[pids[1]]])
        assert _last_seq(ring.replies[0].payload) == start  # its ring: nothing since the switch
        code, reports = _cli("hang", *group, "--min-wait", "0.5")
        assert code == 0, reports
        (report,) = reports
        assert report["paused_ranks"] == [1] and report["findings"] == []
        training = [a.reduce_steps.remote(40) for a in actors]
        code, trace = _cli("trace", *group, "--duration", "1s", "-o", str(tmp_path / "t.json"))
        ray.get(training, timeout=60)
        assert [r["rank"] for r in trace["ranks"]] == [0], trace  # no spans from rank 1
        assert any("level is off" in m for m in trace["missing"]), trace["missing"]
        start += 40

        code, rows = _cli("level", "light", "--ranks", "1", *group)
        assert code == 0 and [(r["rank"], r["state"]["level"]) for r in rows] == [(1, "light")]
        ray.get([a.reduce_steps.remote(2) for a in actors], timeout=60)
        back = wait_until(
            lambda: (
                (s := _summaries(pids))
                and all(x and _last_seq(x) >= start + 7 for x in s)  # both ranks' next heartbeats
                and s
            ),
            what="rank 1 recording again",
        )
        assert not back[1].paused and probes_by_pid(pids)[pids[1]].summaries.get("where")
        assert _last_seq(back[1]) == _last_seq(back[0]) == start + 7  # aligned: torch's counter
        code, (report,) = _cli("hang", *group, "--min-wait", "0.5")
        assert code == 0 and report["paused_ranks"] == []
    finally:
        for a in actors:
            ray.kill(a)
