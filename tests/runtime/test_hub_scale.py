"""The hub's load at scale (issue 20), without Ray: process groups' rank lists go to the hub
once per group, never with every heartbeat; the hub asks for a longer heartbeat interval when
many probes would take more than half a core, and waits longer for them before a check."""

from __future__ import annotations

import asyncio
import pickle

from rankscope.config import Config
from rankscope.context import RankContext
from rankscope.hang import worker
from rankscope.hang.collect import _with_known_groups
from rankscope.hang.worker_recorder import collective_recorder
from rankscope.runtime import probe as probe_module
from rankscope.runtime.capacity import (
    HEARTBEAT_CORE_SHARE,
    HUB_CPU_PER_HEARTBEAT_S,
    MAX_HEARTBEAT_S,
    dead_after_for,
    heartbeat_interval,
)
from rankscope.runtime.hub import Hub
from rankscope.runtime.protocol import PollRequest, ProbeInfo, Progress
from rankscope.runtime.registry import MAX_GROUPS, Registry

T0 = 1_700_000_000.0
WORLD = tuple(range(4096))


def _info(rank: int, job: str = "job", group: str | None = "g") -> ProbeInfo:
    ctx = RankContext(
        rank, rank, 2, "n" * 56, "10.0.0.9", "w", 100 + rank, job, None, "W", None, "explicit"
    )
    ctx = RankContext(**{**ctx.__dict__, "group": group})
    return ProbeInfo(f"{job}-p{rank}", ctx, "0", T0)


def test_the_hub_keeps_one_rank_list_per_group_by_job_and_worker_group():
    registry = Registry(mailbox_size=4)
    for info in (_info(0), _info(1), _info(2, group=None), _info(0, job="other")):
        registry.register(info, Progress(0, T0), T0)
    a0, a1 = registry.find("job-p0"), registry.find("job-p1")
    assert a0 is not None and a1 is not None
    registry.learn_groups(a0, {"0": (0, 1), "tp": (0,)})
    registry.learn_groups(a1, {"0": (0, 1, 2)})  # the newest list of a name wins
    other = registry.find("other-p0")
    assert other is not None
    registry.learn_groups(other, {"0": (5, 6)})
    solo = registry.find("job-p2")
    assert solo is not None
    registry.learn_groups(solo, {"0": (2,)})  # another worker group of the job: kept apart
    assert registry.groups("job") == {"g": {"0": (0, 1, 2), "tp": (0,)}, "": {"0": (2,)}}
    assert registry.groups("other") == {"g": {"0": (5, 6)}}
    assert registry.groups("nobody") == {}
    registry.learn_groups(a0, {f"x{i}": (i,) for i in range(MAX_GROUPS + 10)})
    assert len(registry.groups("job")["g"]) == MAX_GROUPS  # bounded
    registry.learn_groups(a0, {"0": (7,)})  # a known name is still updated
    assert registry.groups("job")["g"]["0"] == (7,)


def test_a_probe_sends_its_groups_once_and_again_only_when_they_change(monkeypatch):
    groups: dict[str, tuple[int, ...]] = {"0": WORLD}
    monkeypatch.setattr(probe_module, "_GROUP_SOURCES", [lambda: dict(groups)])
    probe = probe_module.Probe(Config())
    assert probe._changed_groups() == {"0": WORLD}  # first: sent
    probe._groups_sent = {"0": WORLD}  # the hub took them
    assert probe._changed_groups() is None  # unchanged: nothing
    groups["tp"] = (0, 1)
    assert probe._changed_groups() == {"0": WORLD, "tp": (0, 1)}
    probe._groups_sent = None  # registered again (a restarted hub): sent again
    assert probe._changed_groups() == {"0": WORLD, "tp": (0, 1)}

    def broken() -> dict[str, tuple[int, ...]]:
        raise RuntimeError("dictionary changed size during iteration")

    monkeypatch.setattr(probe_module, "_GROUP_SOURCES", [broken])
    assert probe._changed_groups() is None  # a failing source sends nothing this time


def test_the_collectives_summary_carries_no_rank_list_and_the_group_source_does():
    recorder = collective_recorder()
    recorder._groups[-1] = ("0", WORLD, None, False)
    try:
        assert worker.seen_groups()["0"] == WORLD  # (earlier tests' groups may be there too)
        summary = worker.last_collectives()
        assert summary.groups == {}
        beat = PollRequest("p", Progress(1, T0), (), 0, {"collectives": summary})
        assert len(pickle.dumps(beat)) < 4096  # the heartbeat budget, whatever the world
        assert recorder.snapshot().groups["0"] == WORLD  # the recorder itself keeps them
    finally:
        del recorder._groups[-1]


def test_hang_takes_the_rank_lists_the_hub_keeps_for_a_silent_rank():
    known = {"0": WORLD, "tp": (0, 1)}
    assert _with_known_groups({}, known) == known  # a dead rank's summary: the hub's lists
    own = {"0": (0, 1, 2), "flight": ()}
    assert _with_known_groups(own, known) == {"0": (0, 1, 2), "flight": (), "tp": (0, 1)}
    assert _with_known_groups({"tp": ()}, known)["tp"] == (0, 1)  # known beats "unknown"


def test_the_heartbeat_interval_grows_with_the_probes_so_the_hub_load_stays_bounded():
    assert heartbeat_interval(0, 1.0) == 1.0
    assert heartbeat_interval(300, 1.0) == 1.0  # a few hundred probes: nothing changes
    assert heartbeat_interval(8, 0.25) == 0.25  # the test suite's cluster
    for n in (334, 1024, 4096, 10_000):
        asked = heartbeat_interval(n, 1.0)
        assert n * HUB_CPU_PER_HEARTBEAT_S / asked <= HEARTBEAT_CORE_SHARE  # under half a core
        assert asked < n * HUB_CPU_PER_HEARTBEAT_S / HEARTBEAT_CORE_SHARE + 0.25  # no longer
    assert heartbeat_interval(4096, 1.0) == 12.5  # 4,096 / 333 s, up to a quarter second
    assert heartbeat_interval(4096, 20.0) == 20.0  # never below the configured interval
    assert heartbeat_interval(10**6, 1.0) == MAX_HEARTBEAT_S
    asked = [heartbeat_interval(n, 1.0) for n in range(0, 20_000, 97)]
    assert asked == sorted(asked)  # more probes never ask for more heartbeats
    # the liveness deadline in proportion to the interval asked for
    assert dead_after_for(1.0, 1.0, 5.0) == 5.0
    assert dead_after_for(0.0, 1.0, 5.0) == 5.0  # not asked anything yet: the configured one
    assert dead_after_for(12.5, 1.0, 5.0) == 62.5


def test_a_probe_asked_for_a_long_interval_is_not_silent_within_it():
    registry = Registry(mailbox_size=4)
    registry.register(_info(0), Progress(0, T0), T0)
    registry.register(_info(1), Progress(0, T0), T0)
    slow = registry.find("job-p0")
    assert slow is not None
    slow.interval = 12.5  # parked in a 12.5 s long poll
    assert registry.live_count() == 2
    checked = registry.to_check(T0 + 20, dead_after=5.0, interval=1.0)
    assert [r.info.probe_id for r in checked] == ["job-p1"]  # 20 s silent, told 1 s: checked
    assert registry.to_check(T0 + 63, dead_after=5.0, interval=1.0) == [slow]  # past 62.5 s


def test_a_probe_takes_the_interval_the_hub_asks_within_bounds():
    assert probe_module._interval(12.5, 1.0) == 12.5
    assert probe_module._interval(0.1, 0.25) == 0.25  # never below the configured one
    assert probe_module._interval(1e9, 1.0) == MAX_HEARTBEAT_S


def test_a_registry_read_carries_only_the_summaries_asked_for_and_the_dead_keep_theirs():
    registry = Registry(mailbox_size=4)
    said = {"monitor": {"step_s": 0.1}, "collectives": "16 records", "where": "train.py:88"}
    for rank in range(3):
        registry.register(_info(rank), Progress(0, T0), T0)
        record = registry.find(f"job-p{rank}")
        assert record is not None
        record.heard_from(PollRequest(record.info.probe_id, Progress(5, T0), (), 0, said), T0)
    dead = registry.find("job-p2")
    assert dead is not None
    dead.settle(process_exists=False, now=T0 + 60, dead_after=5.0)
    rows = {r.info.probe_id: r.status(["monitor"]) for r in registry.records("job")}
    assert rows["job-p0"].summaries == {"monitor": {"step_s": 0.1}}
    assert rows["job-p2"].summaries == said  # its last words explain its death
    assert {r.info.probe_id: r.status([]).summaries for r in registry.records("job")} == {
        "job-p0": {},
        "job-p1": {},
        "job-p2": said,
    }
    assert registry.find("job-p1").status().summaries == said  # type: ignore[union-attr]
    assert rows["job-p0"].progress.step == 5  # the row itself is whole


def test_hang_reads_the_heartbeat_evidence_of_the_silent_ranks_only(tmp_path):
    """`hang` reads the registry without summaries, then the last heartbeat's evidence of the
    ranks that did not answer: the hub's read of those rows alone."""

    async def main() -> None:
        hub = Hub(Config(run_dir=str(tmp_path), heartbeat_interval=0.2, dead_after=60.0))
        said = {"collectives": "16 records", "where": "train.py:88", "monitor": {"step_s": 0.1}}
        for rank in range(4):
            await hub.register(_info(rank), Progress(0, T0))
            await hub.last_words(PollRequest(f"job-p{rank}", Progress(5, T0), (), 0, said))
        rows = await hub.list_probes("job", ["collectives", "where"], ["job-p1", "job-p3"])
        assert {r.info.probe_id: r.summaries for r in rows} == {
            "job-p1": {"collectives": "16 records", "where": "train.py:88"},
            "job-p3": {"collectives": "16 records", "where": "train.py:88"},
        }
        assert all(r.summaries == {} for r in await hub.list_probes("job", []))

    asyncio.run(main())
