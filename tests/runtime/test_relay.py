"""Node relays (issue 20), without Ray: the real `RelayCore` in front of the real `Hub` class's
methods, called in process; batching, routing of commands and replies, per-probe liveness and
the fallback when a relay goes away."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from typing import Any

import pytest

from rankscope.config import Config
from rankscope.context import RankContext
from rankscope.runtime.hub import Hub
from rankscope.runtime.protocol import (
    BatchReply,
    Command,
    CommandResult,
    Event,
    PollRequest,
    ProbeInfo,
    ProbeState,
    Progress,
)
from rankscope.runtime.relay import RelayCore, merge_requests


class InProcessHub:
    """The hub's two relay calls, made on a `Hub` in this event loop; counts them."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.polls = self.reply_calls = self.carrying = 0
        """Hub calls: batched polls, reply batches, batched polls that carried replies."""
        self.endpoints: list[Any] = []
        """The endpoint each batched poll sent (None: none)."""
        self.fail = False

    async def poll_batch(
        self,
        relay_id: str,
        entries: list[tuple[str, PollRequest]],
        wait_s: float,
        results: list[tuple[CommandResult, str]],
        endpoint: Any = None,
    ) -> BatchReply:
        self.endpoints.append(endpoint)
        if self.fail:
            raise ConnectionError("hub gone")
        self.polls += 1
        self.carrying += bool(results)
        return await self.hub.poll_batch(relay_id, entries, wait_s, results, endpoint)

    async def reply_batch(self, results: list[tuple[CommandResult, str]]) -> None:
        self.reply_calls += 1
        await self.hub.reply_batch(results)


def _info(rank: int) -> ProbeInfo:
    context = RankContext(
        rank=rank, local_rank=rank, world_size=8, node_id="", node_ip="10.0.0.1",
        hostname="n1", pid=os.getpid(), job_id="job", actor_id=None, actor_class="W",
        task_id=None, rank_source="explicit", group="g",
    )  # fmt: skip
    return ProbeInfo(f"p{rank}", context, "0", 0.0)


def _request(rank: int, step: int, events: tuple[Event, ...] = ()) -> PollRequest:
    return PollRequest(f"p{rank}", Progress(step, time.time()), events, 0, {"where": f"r{rank}"})


async def _sim_probe(relay: RelayCore, rank: int, stop: asyncio.Event, wait_s: float) -> None:
    """A probe's loop through its relay: heartbeat, answer commands with its rank."""
    step = 0
    while not stop.is_set():
        step += 1
        reply = await relay.poll(_request(rank, step), wait_s)
        for command in reply.commands:
            relay.reply(CommandResult(f"p{rank}", True, payload=rank), command.id)


def _hub(tmp_path: Any) -> Hub:
    return Hub(Config(run_dir=str(tmp_path), heartbeat_interval=0.2, dead_after=60.0))  # no checks


def test_a_relay_batches_its_probes_into_few_hub_calls_and_routes_each_reply(tmp_path):
    async def main() -> None:
        hub = _hub(tmp_path)
        for rank in range(8):
            await hub.register(_info(rank), Progress(0, time.time()))
        link = InProcessHub(hub)
        relay = RelayCore("node-a", link)
        stop = asyncio.Event()
        probes = [asyncio.ensure_future(_sim_probe(relay, r, stop, 0.2)) for r in range(8)]
        await asyncio.sleep(0.5)
        polls = link.polls
        result = await hub.fan_out("stacks", job_id="job", deadline_s=2.0)
        assert sorted(r.payload for r in result.replies) == list(range(8))
        assert all(r.probe_id == f"p{r.payload}" for r in result.replies)  # routed per probe
        assert not result.missing
        # the node's 8 answers in one or two calls, the batched poll that waits for the next
        # commands first
        assert link.carrying + link.reply_calls <= 2, (link.carrying, link.reply_calls)
        assert link.carrying >= 1
        assert link.polls - polls <= 4, link.polls - polls  # not 8 per fan-out
        rows = {s.info.probe_id: s for s in await hub.list_probes("job")}
        assert all(s.progress.step > 0 and s.state == ProbeState.ALIVE for s in rows.values())
        assert rows["p3"].summaries == {"where": "r3"}  # each probe's own heartbeat
        stop.set()
        await asyncio.wait(probes, timeout=2.0)

    asyncio.run(main())


def test_a_command_sent_to_a_relay_reaches_its_probes_without_the_hub(tmp_path):
    """The CLI's fan-out to relayed probes: the hub names each probe's relay and how to reach
    it (the endpoint the relay sent once, and again after a failed batch); the relay hands
    the command out and returns its probes' answers, none going through the hub."""

    async def main() -> None:
        hub = _hub(tmp_path)
        for rank in range(9):
            await hub.register(_info(rank), Progress(0, time.time()))
        link = InProcessHub(hub)
        relay = RelayCore("node-a", link, endpoint="relay-a-handle")
        stop = asyncio.Event()
        probes = [asyncio.ensure_future(_sim_probe(relay, r, stop, 0.2)) for r in range(8)]
        await asyncio.sleep(0.5)
        assert link.endpoints[0] == "relay-a-handle"  # sent with the first batch ...
        assert set(link.endpoints[1:]) == {None}  # ... and not again
        routes = await hub.fan_out_routes("job")
        assert routes.direct == ("p8",)  # polls nowhere yet: through the hub
        [route] = routes.relayed
        assert (route.endpoint, route.relay_id) == ("relay-a-handle", "node-a")
        assert sorted(route.probe_ids) == [f"p{r}" for r in range(8)]

        hub_calls = link.polls + link.reply_calls
        start = time.monotonic()
        answers = await relay.commands(
            [(Command("c1", "stacks"), [*route.probe_ids, "p9"]), (Command("k1", "x"), ["p2"])],
            2.0,
        )
        assert time.monotonic() - start < 0.5  # all in: no wait for the deadline
        assert sorted(r.payload for r in answers["c1"]) == list(range(8))
        assert [r.probe_id for r in answers["k1"]] == ["p2"]  # both commands, one call
        assert link.carrying == 0 and link.reply_calls == 0  # the hub saw no answer
        assert link.polls + link.reply_calls - hub_calls <= 2  # the heartbeats' batches only

        stop.set()  # the probes stop polling: a command's answers wait for its deadline
        await asyncio.wait(probes, timeout=2.0)
        start = time.monotonic()
        assert await relay.commands([(Command("c2", "stacks"), ["p0"])], 0.3) == {"c2": []}
        assert 0.3 <= time.monotonic() - start < 1.0

        late = await relay.poll(_request(0, 98), 0.2)  # c2, held for the probe's next poll
        assert [c.id for c in late.commands] == ["c2"]
        link.fail = True  # a failed batch: the next one sends the endpoint again (a new hub)
        with pytest.raises(ConnectionError):
            await relay.poll(_request(0, 99), 0.2)
        link.fail = False
        await relay.poll(_request(0, 100), 0.2)
        assert link.endpoints[-1] == "relay-a-handle"

    asyncio.run(main())


def test_probes_of_a_relay_stay_alive_while_parked_and_go_silent_alone(tmp_path):
    async def main() -> None:
        hub = _hub(tmp_path)
        for rank in range(2):
            await hub.register(_info(rank), Progress(0, time.time()))
        relay = RelayCore("node-a", InProcessHub(hub))
        stop = asyncio.Event()
        alive = asyncio.ensure_future(_sim_probe(relay, 0, stop, 0.2))
        await relay.poll(_request(1, 1), 0.2)  # rank 1 heartbeats once, then stops polling
        await asyncio.sleep(1.5)
        rows = {s.info.probe_id: s for s in await hub.list_probes("job")}
        assert time.time() - rows["p0"].last_seen < 0.6  # parked at its relay: alive
        assert time.time() - rows["p1"].last_seen > 1.0  # not polling: silent, for the reaper
        stop.set()
        await asyncio.wait([alive], timeout=2.0)

    asyncio.run(main())


def test_a_probe_unknown_to_the_hub_is_told_to_register_and_a_failed_hub_call_raises(tmp_path):
    async def main() -> None:
        hub = _hub(tmp_path)
        link = InProcessHub(hub)
        relay = RelayCore("node-a", link)
        reply = await relay.poll(_request(5, 1), 0.2)
        assert not reply.known  # as the hub's own poll: register again
        await hub.register(_info(5), Progress(0, time.time()))
        assert (await relay.poll(_request(5, 2), 0.2)).known
        link.fail = True  # the probe then polls the hub directly (RelayLink)
        try:
            await relay.poll(_request(5, 3), 0.2)
        except ConnectionError:
            pass
        else:
            raise AssertionError("a relay whose hub call failed must not answer as if fine")

    asyncio.run(main())


def test_a_probe_that_polls_the_hub_directly_leaves_its_relay_and_gets_its_commands(tmp_path):
    async def main() -> None:
        hub = _hub(tmp_path)
        await hub.register(_info(0), Progress(0, time.time()))
        relay = RelayCore("node-a", InProcessHub(hub))
        await relay.poll(_request(0, 1), 0.2)
        # the relay died: the probe polls the hub itself, and a command reaches it there
        direct = asyncio.ensure_future(hub.poll(_request(0, 2), 2.0))
        await asyncio.sleep(0.05)
        asking = asyncio.ensure_future(hub.fan_out("stacks", job_id="job", deadline_s=1.0))
        reply = await asyncio.wait_for(direct, 1.0)
        assert [c.kind for c in reply.commands] == ["stacks"]
        await hub.reply(CommandResult("p0", True, payload="ok"), reply.commands[0].id)
        assert [r.payload for r in (await asking).replies] == ["ok"]

    asyncio.run(main())


def test_through_a_relay_a_probe_heartbeats_once_an_interval_and_keeps_the_relay(tmp_path):
    async def main() -> None:
        config = Config(run_dir=str(tmp_path), heartbeat_interval=0.2, dead_after=60.0)
        hub = Hub(dataclasses.replace(config, relay_above=0))  # the hub asks for relays
        await hub.register(_info(0), Progress(0, time.time()))
        link = InProcessHub(hub)
        relay = RelayCore("node-a", link)
        replies = []
        start = time.time()
        while time.time() - start < 1.0:  # a probe at a 0.2 s interval, for 1 s
            replies.append(await relay.poll(_request(0, len(replies) + 1), 0.2))
        # the batch waits half the interval; the probe still polls once an interval, not twice
        assert 4 <= len(replies) <= 6, len(replies)
        # the hub's wish for relays reaches the probe through its relay (no flip to the hub)
        assert all(r.relay for r in replies[2:])  # once the hub counted its live probes
        # the hold at the relay counts as the hub's: the probe's clock sample stays tight
        r = replies[-1]
        assert r.hub_received is not None and r.hub_replied is not None
        assert r.hub_replied - r.hub_received > 0.15

    asyncio.run(main())


def test_held_events_are_bounded_and_a_dead_relayed_probe_leaves_its_relay(tmp_path):
    from rankscope.runtime.hub_relays import HubRelays
    from rankscope.runtime.relay import MAX_HELD_EVENTS

    many = tuple(Event("e", float(i), {}) for i in range(MAX_HELD_EVENTS))
    merged = merge_requests(_request(0, 1, many), _request(0, 2, many[:10]))
    assert len(merged.events) == MAX_HELD_EVENTS and merged.dropped_events == 10
    assert merged.events[-1] is many[9]  # the newest kept

    async def main() -> None:
        hub = _hub(tmp_path)
        await hub.register(_info(0), Progress(0, time.time()))
        (record,) = hub._registry.targets("job", None)
        relays = HubRelays()
        relays.join("node-a", record)
        record.state = ProbeState.DEAD
        relays.prune()
        assert relays.take("node-a") == {} and record.relay is None

    asyncio.run(main())


def test_two_heartbeats_not_yet_forwarded_merge_keeping_every_event():
    first = _request(0, 1, (Event("a", 1.0, {}),))
    second = _request(0, 2, (Event("b", 2.0, {}),))
    merged = merge_requests(first, second)
    assert merged.progress.step == 2
    assert [e.kind for e in merged.events] == ["a", "b"]
    with_groups = PollRequest("p0", first.progress, (), 0, {}, {"0": (0, 1)})
    assert merge_requests(with_groups, second).groups == {"0": (0, 1)}  # still to be sent


def test_the_hub_measures_what_a_heartbeat_costs_it_and_spaces_them_by_that():
    from rankscope.runtime.capacity import (
        HUB_CPU_PER_HEARTBEAT_S,
        MIN_SAMPLE_BEATS,
        HeartbeatCost,
        heartbeat_interval,
    )

    meter = HeartbeatCost()
    assert meter.sample(10.0, 0) == HUB_CPU_PER_HEARTBEAT_S  # nothing measured yet
    assert meter.sample(10.1, MIN_SAMPLE_BEATS - 1) == HUB_CPU_PER_HEARTBEAT_S  # too few
    for i in range(1, 40):  # 3 ms a heartbeat, for a while: the estimate follows
        meter.sample(10.0 + i * 0.6, i * MIN_SAMPLE_BEATS)
    assert abs(meter.cost - 3e-3) < 1e-4
    assert meter.sample(1e6, 40 * MIN_SAMPLE_BEATS) <= 10e-3 * 0.2 + 3e-3 * 0.8 + 1e-9  # clamped
    assert meter.for_probes(4096) == meter.cost  # used at scale ...
    assert meter.for_probes(16) == HUB_CPU_PER_HEARTBEAT_S  # ... not for a small job
    assert heartbeat_interval(4096, 1.0, 3e-3) == 24.75  # 4,096 x 3 ms / half a core
    assert heartbeat_interval(4096, 1.0, 0.5e-3) == 4.25  # cheaper (relays): more often


def test_a_probe_on_a_node_ray_declared_dead_is_told_to_stop_polling(tmp_path):
    async def main() -> None:
        hub = _hub(tmp_path)
        for rank in range(2):
            await hub.register(_info(rank), Progress(0, time.time()))
        why = "Ray declared node 10.0.0.1 dead (raylet gone)"
        hub._registry.mark_nodes_gone({"": why})  # what the node sweep does
        reply = await hub.poll(_request(0, 1), 5.0)
        assert reply.stop == f"node gone: {why}" and not reply.commands  # at once, no wait
        relayed = await RelayCore("node-a", InProcessHub(hub)).poll(_request(1, 1), 5.0)
        assert relayed.stop == f"node gone: {why}"
        rows = {s.info.probe_id: s for s in await hub.list_probes("job")}
        assert rows["p1"].state == ProbeState.DEAD and rows["p1"].summaries  # last words kept

    asyncio.run(asyncio.wait_for(main(), 3.0))


def test_hang_at_scale_asks_each_groups_newest_records_and_finds_the_same_hang():
    """`rankscope hang` past 256 ranks asks each rank for its groups' newest records, not its
    whole ring; the analysis, which aligns the newest sequence numbers, says the same."""
    from rankscope.hang.analysis import analyze_hang
    from rankscope.hang.model import CallState, CollectiveRecord
    from rankscope.hang.worker import WINDOW_PER_GROUP, newest_per_group

    def rec(group: str, seq: int, started: bool = False) -> CollectiveRecord:
        state = CallState.STARTED if started else CallState.COMPLETED
        return CollectiveRecord(group, seq, "all_reduce", ((8,),), ("float32",), 900.0,
                                None if started else 900.1, state, "train.py:88")  # fmt: skip

    def ring(rank: int) -> tuple[CollectiveRecord, ...]:  # 2,000 calls, two groups interleaved
        last = 1000 if rank == 3 else 1001  # rank 3 never enters #1001 of group "dp"
        out = [rec(g, s) for s in range(1, last) for g in ("dp", "tp")]
        return (*out, *([rec("dp", last, started=True)] if rank != 3 else []))

    from rankscope.hang.analysis import RankEvidence

    groups = {"dp": (0, 1, 2, 3), "tp": (0, 1, 2, 3)}
    full = [RankEvidence(r, ring(r), groups) for r in range(4)]
    window = [
        RankEvidence(r, newest_per_group(ring(r), WINDOW_PER_GROUP), groups) for r in range(4)
    ]
    assert len(window[0].records) == 2 * WINDOW_PER_GROUP  # the newest of each group
    assert window[0].records[-1].seq == 1001 and window[0].records[-1].group == "dp"
    assert analyze_hang("j", window, 1000.0).findings == analyze_hang("j", full, 1000.0).findings
    assert analyze_hang("j", window, 1000.0).findings[0].ranks == (3,)


def test_a_probe_parked_when_its_node_is_declared_gone_is_told_to_stop_and_stays_dead(tmp_path):
    """The node sweep marks a node gone while its probes wait in their long polls (direct or
    at a relay): each poll ends with `stop`, and none counts as a heartbeat after the death."""

    async def main() -> None:
        hub = _hub(tmp_path)
        for rank in range(2):
            info = _info(rank)
            on_node = dataclasses.replace(info.context, node_id="node-gone")
            await hub.register(dataclasses.replace(info, context=on_node), Progress(0, time.time()))
        direct = asyncio.ensure_future(hub.poll(_request(0, 1), 1.0))
        relayed = asyncio.ensure_future(hub.poll_batch("relay-a", [("p1", _request(1, 1))], 1.0))
        await asyncio.sleep(0.1)
        hub._registry.mark_nodes_gone({"node-gone": "Ray declared it dead"})  # the node sweep
        declared = time.time()
        reply, batch = await asyncio.wait_for(asyncio.gather(direct, relayed), 2.0)
        assert reply.stop == "node gone: Ray declared it dead", reply
        assert batch.stop == {"p1": "node gone: Ray declared it dead"}, batch
        rows = {s.info.probe_id: s for s in await hub.list_probes("job")}
        assert all(s.state == ProbeState.DEAD for s in rows.values()), rows
        assert all(s.last_seen < declared for s in rows.values()), rows

    asyncio.run(main())
