"""Node relays on the session's two-node cluster (issue 20): probes told to use their node's
relay poll through it and `stacks` still reaches every rank, asking the relay directly; the
relay killed, `stacks` still answers within its deadline and its probes stay alive, polling the
hub directly."""

from __future__ import annotations

import time

import ray

from helpers.cluster import probes_by_pid, wait_registered
from helpers.workers import WORKER_NODE_RESOURCE, GlooRank, wait_until
from rankscope.config import hub_namespace
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeState
from rankscope.runtime.relay_actor import relay_name
from rankscope.stacks.collect import collect_stacks

DEADLINE_S = 2.0


def _sources(client: HubClient, pids: list[int]) -> tuple[dict[int, str], float]:
    """`stacks`' collection for these processes: where each one's stack came from, and how
    long it took."""
    probes = list(probes_by_pid(pids).values())
    start = time.monotonic()
    found = collect_stacks(client, probes, deadline_s=DEADLINE_S, children=False)
    return {s.status.context.pid: s.source for s in found}, time.monotonic() - start


def test_probes_poll_through_their_node_relay_and_survive_its_death(cluster):
    relayed = ray.remote(num_cpus=0)(GlooRank).options(
        resources={WORKER_NODE_RESOURCE: 1},
        runtime_env={"env_vars": {"RANKSCOPE_RELAY_ABOVE": "0"}},  # this job wants relays
    )
    direct = ray.remote(num_cpus=0)(GlooRank).options(resources={"node:__internal_head__": 0.01})
    actors = [relayed.remote(r, 3, explicit_rank=True) for r in range(2)]
    actors.append(direct.remote(2, 3, explicit_rank=True))
    pids = ray.get([a.pid.remote() for a in actors])
    node_id = ray.get(actors[0].node_id.remote())
    wait_registered(pids, ranked=True)
    try:
        relay = None

        def serving() -> bool:
            nonlocal relay
            try:
                relay = ray.get_actor(relay_name(node_id), namespace=hub_namespace())
                return bool(ray.get(relay.probes.remote(), timeout=10) == 2)
            except ValueError:
                return False

        wait_until(serving, timeout=60, what="both worker-node probes to poll via the relay")
        client = HubClient.attach()
        relayed_ids = sorted(p.info.probe_id for p in probes_by_pid(pids[:2]).values())

        def routed() -> bool:  # the hub knows how to reach the relay: fan-outs skip the hub
            routes = ray.get(client.handle.fan_out_routes.remote(probe_ids=relayed_ids))
            return [sorted(r.probe_ids) for r in routes.relayed] == [relayed_ids]

        wait_until(routed, timeout=30, what="the hub to route the relayed probes' fan-outs")
        relayed_probes = list(probes_by_pid(pids[:2]).values())
        with client.together():  # two fan-outs, one call to the relay
            stacks = client.start_fan_out("stacks", relayed_probes, deadline_s=DEADLINE_S)
            kids = client.start_fan_out("children", relayed_probes, deadline_s=DEADLINE_S)
        for asked in (stacks(), kids()):
            assert sorted(r.probe_id for r in asked.replies if r.ok) == relayed_ids, asked
            assert not asked.missing
        sources, _ = _sources(client, pids)
        assert sources == dict.fromkeys(pids, "probe")  # every rank answered, through the relay

        ray.kill(relay)
        sources, took = _sources(client, pids)
        assert set(sources) == set(pids)  # every rank named, by its probe or by py-spy
        assert took < DEADLINE_S + 30.0, took  # py-spy's own bound for the ones that missed it
        time.sleep(1.0)  # the next heartbeat goes to the hub directly
        sources, took = _sources(client, pids)
        assert sources == dict.fromkeys(pids, "probe"), sources
        assert took < DEADLINE_S + 1.0, took
        states = {p: s.state for p, s in probes_by_pid(pids).items()}
        assert states == dict.fromkeys(pids, ProbeState.ALIVE)  # never silent for the hub
    finally:
        for a in actors:
            ray.kill(a)
