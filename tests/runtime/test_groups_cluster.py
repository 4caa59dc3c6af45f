"""Ranks are unique within a group, not within a job: two 2-rank gloo groups in one Ray job.

As verl's worker groups (actor, critic, rollout pools) each have ranks 0..N-1 in one job.
"""

from __future__ import annotations

import json

import ray
from typer.testing import CliRunner

import rankscope.cli.main as cli
from helpers.cluster import wait_registered
from helpers.workers import GlooRank, wait_until


def _group_of_two() -> tuple[list, str]:
    actor = ray.remote(num_cpus=0)(GlooRank)
    actors = [actor.remote(r, 2) for r in range(2)]
    host, port = ray.get(actors[0].address.remote())
    ray.get([a.join.remote(host, port) for a in actors], timeout=120)
    wait_registered(ray.get([a.pid.remote() for a in actors]), ranked=True)
    return actors, f"{host}:{port}"


def _hang(*args: str) -> tuple[int, list[dict]]:
    result = CliRunner().invoke(cli.app, ["hang", "--json", "--min-wait", "0.5", *args])
    assert result.exit_code in (0, 1, 2), result.output
    if result.exit_code == 2:
        return 2, []
    return result.exit_code, json.loads(result.output)["data"]


def test_two_groups_with_the_same_ranks_are_told_apart_and_selected(cluster, tmp_path):
    healthy, healthy_group = _group_of_two()
    stuck, stuck_group = _group_of_two()
    release = tmp_path / "release"
    ray.get([a.step_once.remote() for a in healthy])
    stuck[0].step_once.remote()
    stuck[1].step_once.remote(str(release))
    try:

        def stuck_report() -> dict | None:
            _, reports = _hang()
            found = [r for r in reports if r["group"] == stuck_group and r["findings"]]
            return found[0] if found else None

        report = wait_until(stuck_report, timeout=30, what="the stuck group's hang")
        [finding] = report["findings"]
        assert finding["kind"] == "hang" and finding["ranks"] == [1]
        assert finding["message"].startswith("group 0 (2 ranks): rank 0 wait in all_reduce")
        _, reports = _hang()
        [fine] = [r for r in reports if r["group"] == healthy_group]
        assert fine["findings"] == []

        code, only = _hang("--group", stuck_group)
        assert code == 1 and [r["group"] for r in only] == [stuck_group]
        text = CliRunner().invoke(cli.app, ["hang", "--group", stuck_group, "--min-wait", "0.5"])
        assert f", group {stuck_group}: 1 finding(s)" in text.output
        status = CliRunner().invoke(cli.app, ["status", "--group", stuck_group, "--json"])
        [listed] = json.loads(status.output)["data"].values()
        assert sorted(p["info"]["context"]["group"] for p in listed["processes"]) == [
            stuck_group,
            stuck_group,
        ]
        stacks = CliRunner().invoke(cli.app, ["stacks", "--group", healthy_group, "--json"])
        [report] = json.loads(stacks.output)["data"]
        assert report["process_count"] == 2
        job = ray.get_runtime_context().get_job_id()  # other tests' jobs may still be live
        wrong = CliRunner().invoke(cli.app, ["hang", "--job", job, "--group", "no-such-group"])
        assert wrong.exit_code == 2
        assert "--group no-such-group: matches no group of this job" in wrong.output
        assert stuck_group in wrong.output
    finally:
        release.write_text("go")
        for a in healthy + stuck:
            ray.kill(a)
