"""The hub's load at scale (issue 20), without Ray: process groups' rank lists go to the hub
once per group, never with every heartbeat."""

from __future__ import annotations

import pickle

from rankscope.config import Config
from rankscope.context import RankContext
from rankscope.hang import evidence
from rankscope.hang.collect import _with_known_groups
from rankscope.hang.recorder import collective_recorder
from rankscope.runtime import probe as probe_module
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
        assert evidence.seen_groups() == {"0": WORLD}
        summary = evidence.last_collectives()
        assert summary.groups == {}
        beat = PollRequest("p", Progress(1, T0), (), 0, {"collectives": summary})
        assert len(pickle.dumps(beat)) < 4096  # the heartbeat budget, whatever the world
        assert recorder.snapshot().groups == {"0": WORLD}  # the `collectives` command keeps them
    finally:
        del recorder._groups[-1]


def test_hang_takes_the_rank_lists_the_hub_keeps_for_a_silent_rank():
    known = {"0": WORLD, "tp": (0, 1)}
    assert _with_known_groups({}, known) == known  # a dead rank's summary: the hub's lists
    own = {"0": (0, 1, 2), "flight": ()}
    assert _with_known_groups(own, known) == {"0": (0, 1, 2), "flight": (), "tp": (0, 1)}
    assert _with_known_groups({"tp": ()}, known)["tp"] == (0, 1)  # known beats "unknown"
