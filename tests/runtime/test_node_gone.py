"""A node Ray declared dead: its probes are dead ("node gone") in the hub's registry even while
they still heartbeat (issue 20). The registry's rules and the node table's reading, no Ray."""

from __future__ import annotations

from rankscope.context import RankContext
from rankscope.runtime.liveness import dead_nodes_of
from rankscope.runtime.protocol import PollRequest, ProbeInfo, ProbeState, Progress
from rankscope.runtime.registry import Registry

T0 = 1_700_000_000.0
GONE, KEPT = "a" * 56, "b" * 56


def _info(rank: int, node_id: str) -> ProbeInfo:
    ctx = RankContext(
        rank, rank, 2, node_id, "10.0.0.9", "w", 100 + rank, "job", None, "W", None, "explicit"
    )
    return ProbeInfo(f"p{rank}", ctx, "0", T0)


def _registry() -> Registry:
    registry = Registry(mailbox_size=4)
    registry.register(_info(0, GONE), Progress(0, T0), T0)
    registry.register(_info(1, KEPT), Progress(0, T0), T0)
    return registry


def _state(registry: Registry, probe_id: str) -> ProbeState:
    record = registry.find(probe_id)
    assert record is not None
    return record.state


def test_a_probe_on_a_dead_node_is_dead_for_good_even_while_it_heartbeats():
    registry = _registry()
    assert registry.live_node_ids() == {GONE, KEPT}
    marked = registry.mark_nodes_gone({GONE: "Ray declared node 10.0.0.9 dead (x)"})
    assert [r.info.probe_id for r in marked] == ["p0"]
    assert registry.mark_nodes_gone({GONE: "again"}) == []  # marked once
    assert _state(registry, "p0") == ProbeState.DEAD and _state(registry, "p1") == ProbeState.ALIVE
    # its worker outlived the raylet: it still heartbeats, and re-registers; it stays dead
    record = registry.find("p0")
    assert record is not None
    record.heard_from(PollRequest("p0", Progress(7, T0 + 5)), T0 + 5)
    registry.register(_info(0, GONE), Progress(7, T0 + 6), T0 + 6)
    record.settle(True, T0 + 60, dead_after=2)  # a liveness check never revives it either
    status = record.status()
    assert status.state == ProbeState.DEAD
    assert status.reason == "node gone: Ray declared node 10.0.0.9 dead (x)"
    assert status.progress.step == 7  # what it last said is kept
    assert registry.live_node_ids() == {KEPT}  # the sweep stops looking at that node
    assert [r.info.probe_id for r in registry.targets("job", None)] == ["p1"]  # no commands


def test_the_node_table_names_only_dead_nodes_and_why():
    table = [
        {"NodeID": KEPT, "Alive": True, "NodeManagerAddress": "10.0.0.1"},
        {
            "NodeID": GONE,
            "Alive": False,
            "NodeManagerAddress": "10.0.0.9",
            "DeathReason": 2,
            "DeathReasonMessage": "health check failed due to missing too many heartbeats",
        },
        {"NodeID": "c" * 56, "Alive": False, "NodeManagerAddress": "", "DeathReason": 1},
        {"NodeID": "d" * 56, "Alive": False, "DeathReason": 0},
        {"Alive": False},  # no id: nothing to match a probe with
    ]
    assert dead_nodes_of(table) == {
        GONE: "Ray declared node 10.0.0.9 dead "
        "(health check failed due to missing too many heartbeats)",
        "c" * 56: "Ray declared node cccccccccccc dead (removed)",
        "d" * 56: "Ray declared node dddddddddddd dead",
    }
