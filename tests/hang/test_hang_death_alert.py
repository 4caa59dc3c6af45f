"""The hub's death alert (hang/hub_death_alert.py) on synthetic registry rows (no Ray): the first
death of a group is raised, the ranks a torn-down group loses after it are not."""

from __future__ import annotations

from rankscope.context import RankContext
from rankscope.hang.hub_death_alert import first_death_alert
from rankscope.runtime.hub_hooks import on_death
from rankscope.runtime.protocol import ProbeInfo, ProbeState, ProbeStatus, Progress

NOW = 1_000.0


def _probe(rank: int | None, state=ProbeState.ALIVE, seen=NOW, actor: str | None = "W", reason=""):
    ctx = RankContext(rank, 0, 4, "n0", "10.0.0.1", "h0", 100 + (rank or 50), "job", None,
                      actor, None, "env", "g" if rank is not None else None)  # fmt: skip
    info = ProbeInfo(f"p{rank}", ctx, "0", NOW)
    return ProbeStatus(info, state, NOW - 99, seen, Progress(1, NOW), 0, 0, {}, reason)


def test_the_first_death_of_a_group_is_raised_with_its_rank_and_node():
    dead = _probe(1, ProbeState.DEAD, seen=NOW - 6)
    job = [_probe(0), dead, _probe(2), _probe(3)]
    alert = first_death_alert(dead, job, NOW)
    assert alert is not None and (alert.rule, alert.rank, alert.severity) == (
        "death",
        1,
        "critical",
    )
    assert alert.message.startswith("rank 1 died (pid 101 on 10.0.0.1): its process is gone")


def test_the_ranks_that_followed_it_raise_nothing_and_a_node_loss_is_said():
    first = _probe(1, ProbeState.DEAD, seen=NOW - 8)
    follower = _probe(2, ProbeState.DEAD, seen=NOW - 6)
    job = [_probe(0, ProbeState.UNRESPONSIVE, seen=NOW - 6), first, follower, _probe(3)]
    assert first_death_alert(follower, job, NOW) is None
    assert first_death_alert(first, job, NOW) is not None
    gone = _probe(3, ProbeState.DEAD, seen=NOW - 1, reason="node gone: Ray declared node dead")
    alert = first_death_alert(gone, [_probe(0), gone], NOW)
    assert alert is not None and "node gone: Ray declared node dead" in alert.message


def test_a_pool_worker_raises_nothing_and_the_hook_gives_the_event():
    pool = _probe(None, ProbeState.DEAD, actor=None)
    assert first_death_alert(pool, [pool], NOW) is None
    dead = _probe(1, ProbeState.DEAD, seen=NOW - 6)
    [(kind, payload)] = on_death(dead, [_probe(0), dead])
    assert kind == "alert" and payload["rule"] == "death" and payload["rank"] == 1


def test_a_rank_torn_down_before_the_hub_marked_the_silent_one_names_the_silent_one():
    """Rank 2 was SIGKILL-ed or lost its node; its peer rank 3 died seconds later and the hub
    learnt of that first: the alert names rank 2 then, and not again once rank 2 is proven
    dead."""
    silent = _probe(2, ProbeState.ALIVE, seen=NOW - 5)  # its liveness check still runs
    torn_down = _probe(3, ProbeState.DEAD, seen=NOW - 1)
    job = [_probe(0), _probe(1), silent, torn_down]
    alert = first_death_alert(torn_down, job, NOW, heartbeat_s=1.0)
    assert alert is not None and (alert.rank, alert.pid) == (2, 102)
    assert alert.message.startswith(
        "rank 2 went silent (pid 102 on 10.0.0.1): no heartbeat for 4 s before rank 3 died: "
        "its process or its node is gone"
    )
    late = _probe(2, ProbeState.ALIVE, seen=NOW - 1.5)  # one heartbeat late is not silent
    alert = first_death_alert(torn_down, [_probe(0), late, torn_down], NOW, 1.0)
    assert alert is not None and alert.rank == 3
    [(_, payload)] = on_death(torn_down, job)  # the hub's hook: rank 2 named now ...
    assert payload["rank"] == 2
    proven = _probe(2, ProbeState.DEAD, seen=NOW - 5, reason="node gone: Ray declared it dead")
    assert on_death(proven, [_probe(0), _probe(1), proven, torn_down]) == []  # ... and once


def test_a_peer_killed_a_second_before_the_first_rank_proven_dead_is_the_one_named():
    """SIGKILL on rank 2; rank 1 failed in its collective 1.5 s later; the hub proved rank 1
    dead first (both after 5 s of silence): rank 2, silent for 6.5 s by now, went first."""
    killed = _probe(2, ProbeState.ALIVE, seen=NOW - 6.5)
    failed = _probe(1, ProbeState.DEAD, seen=NOW - 5.0)
    alert = first_death_alert(failed, [_probe(0), failed, killed, _probe(3)], NOW, 1.0)
    assert alert is not None and alert.rank == 2 and "went silent" in alert.message
