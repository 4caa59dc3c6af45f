"""Processes the setup hook never reaches: a rank's child engine, seen through py-spy."""

from __future__ import annotations

import json

import ray
from typer.testing import CliRunner

import rankscope.cli.main as cli
from helpers.cluster import wait_registered
from helpers.workers import EngineOwner, wait_until
from rankscope.hang.collect import whereabouts
from rankscope.runtime.ask import Command, ask
from rankscope.runtime.client import HubClient


def test_stacks_show_a_ranks_child_process_labelled_as_its_child(cluster):
    owner = ray.remote(num_cpus=0)(EngineOwner).remote()
    try:
        wait_registered([ray.get(owner.pid.remote())], ranked=True)
        child = ray.get(owner.start_engine.remote())

        def engine_group() -> dict | None:
            result = CliRunner().invoke(cli.app, ["stacks", "--group", "engine-test", "--json"])
            assert result.exit_code in (0, 1), result.output
            for report in json.loads(result.output)["data"]:
                for group in report["groups"]:
                    if any(m["pid"] == child for m in group["members"]):
                        return group
            return None

        group = wait_until(engine_group, timeout=30, what="the engine's stack")
        [member] = [m for m in group["members"] if m["pid"] == child]
        assert member["parent"] == "rank 0" and member["rank"] is None
        assert group["headline"].startswith("generate_tokens <string>:")

        text = CliRunner().invoke(cli.app, ["stacks", "--group", "engine-test"]).output
        assert f"rank 0's child pid {child}: generate_tokens" in text

        # `hang` says where the rank is, and where the engine it waits for is
        client = HubClient.attach()
        members = [p for p in client.probes() if p.context.group == "engine-test"]
        located, kids = ask(client, members, [Command("where"), Command("children")], 5.0)
        [where] = whereabouts(located, kids).values()
        assert f"; its child pid {child} (" in where and ") is in generate_tokens" in where, where
    finally:
        ray.get(owner.stop_engine.remote())
        ray.kill(owner)
