"""The hang feature's alert judge on synthetic heartbeat rows (no Ray): when it looks, what
it raises, and that waits shorter than the threshold raise nothing."""

from __future__ import annotations

from rankscope.context import RankContext
from rankscope.hang.model import CallState, CollectiveRecord, RecorderSnapshot
from rankscope.hang.worker_group_judge import group_alerts, needs_a_look, wait_threshold
from rankscope.runtime.protocol import ProbeInfo, ProbeState, ProbeStatus, Progress

NOW = 1_000.0
GROUP = "10.0.0.1:29500"


def _rec(seq: int, state=CallState.COMPLETED, start: float = 900.0, shape=(8,)):
    end = None if state is CallState.STARTED else start + 0.01
    return CollectiveRecord(
        "0", seq, "all_reduce", (shape,), ("float32",), start, end, state, "train.py:88"
    )


def _probe(rank: int, records, where: str, state=ProbeState.ALIVE, waiting=None, seen=NOW):
    ctx = RankContext(
        rank, rank, 4, "n0", "10.0.0.1", "h0", 100 + rank, "job", None, "W", None, "env", GROUP
    )
    snapshot = RecorderSnapshot(tuple(records), {}, 0, True)
    summaries = {"collectives": snapshot, "where": where}
    return ProbeStatus(
        ProbeInfo(f"p{rank}", ctx, "0", NOW),
        state,
        NOW - 60,
        seen,
        Progress(5, NOW - 30, waiting),
        0,
        0,
        summaries,
    )


def _stalled_job(waited: float) -> list[ProbeStatus]:
    start = NOW - waited
    waiting = [_rec(3), _rec(4, CallState.STARTED, start)]
    probes = [_probe(r, waiting, "all_reduce <- step train.py:88", waiting=start) for r in range(3)]
    probes.append(_probe(3, [_rec(3)], "load_batch data.py:41"))
    return probes


def test_a_rank_stuck_elsewhere_is_raised_once_its_peers_waited_past_the_threshold():
    probes = _stalled_job(waited=12.0)
    assert needs_a_look(probes, GROUP, NOW, 10.0)
    [alert] = group_alerts("job", GROUP, probes, {"0": (0, 1, 2, 3)}, NOW, 10.0)
    assert (alert.rule, alert.rank, alert.severity) == ("hang", 3, "critical")
    assert "rank 3 never entered #4" in alert.message
    assert "load_batch data.py:41" in alert.message


def test_a_wait_under_the_threshold_is_not_looked_at_nor_raised():
    probes = _stalled_job(waited=6.0)
    assert not needs_a_look(probes, GROUP, NOW, 10.0)
    assert group_alerts("job", GROUP, probes, {"0": (0, 1, 2, 3)}, NOW, 10.0) == []


def test_the_threshold_grows_with_the_groups_step_time():
    assert wait_threshold([]) == 10.0
    assert wait_threshold([0.5, 0.6, 0.4]) == 10.0
    assert wait_threshold([4.0, 4.2, 3.9]) == 20.0


def test_a_desync_is_raised_with_the_odd_rank():
    probes = [
        _probe(
            r, [_rec(3), _rec(4, CallState.STARTED, NOW - 15)], "x train.py:88", waiting=NOW - 15
        )
        for r in range(3)
    ]
    odd = [_rec(3), _rec(4, CallState.STARTED, NOW - 15, shape=(16,))]
    probes.append(_probe(3, odd, "x train.py:88", waiting=NOW - 15))
    alerts = group_alerts("job", GROUP, probes, {"0": (0, 1, 2, 3)}, NOW, 10.0)
    assert [a.rule for a in alerts] == ["desync"]
    assert alerts[0].rank == 3


def test_a_rank_that_moves_between_looks_is_slow_and_not_raised_until_the_limit():
    from rankscope.hang.motion import Mark
    from rankscope.hang.worker_group_judge import stuck_only

    [hang] = group_alerts("job", GROUP, _stalled_job(waited=12.0), {"0": (0, 1, 2, 3)}, NOW, 10.0)
    same = {3: Mark(5, ("0", 7), "aa:0")}
    assert stuck_only([hang], same, same, 12.0) == [hang]  # it did not move: stuck
    log_line = {3: Mark(5, ("0", 7), "aa:4096")}
    assert stuck_only([hang], same, log_line, 12.0) == [hang]  # a log line: stuck
    assert stuck_only([hang], same, {3: Mark(5, ("0", 7), f"aa:{8 << 20}")}, 12.0) == []  # slow
    assert stuck_only([hang], same, {3: Mark(6, ("0", 7), "aa:0")}, 12.0) == []  # it stepped
    assert stuck_only([hang], same, {3: Mark(5, ("0", 8), "aa:0")}, 12.0) == []  # it reduced
    assert stuck_only([hang], {}, same, 12.0) == []  # no earlier look: the next turn decides
    assert stuck_only([hang], same, {3: Mark(5, ("0", 7), "bb:0")}, 400.0) == [hang]  # too long
    one_beat = {3: Mark(5, ("0", 7), "aa:0", seen=NOW - 3)}  # no heartbeat between the looks
    assert stuck_only([hang], one_beat, one_beat, 12.0) == []  # a loaded node: the next turn
    later = {3: Mark(5, ("0", 7), "aa:0", seen=NOW - 1)}
    assert stuck_only([hang], one_beat, later, 12.0) == [hang]  # heard again, did not move


def test_a_collective_failed_for_a_dead_peer_is_the_hubs_death_alert_not_a_second_one():
    """Ranks 0-2 failed in all_reduce #4 that rank 3 never entered: raised while rank 3 lives
    (a collective timeout), left to the hub's death alert once rank 3 is dead."""
    failed = [_rec(3), _rec(4, CallState.FAILED, NOW - 12)]

    def job(culprit: ProbeState) -> list[ProbeStatus]:
        probes = [_probe(r, failed, "all_reduce <- step train.py:88") for r in range(3)]
        return [*probes, _probe(3, [_rec(3)], "load_batch data.py:41", state=culprit)]

    [alert] = group_alerts("job", GROUP, job(ProbeState.ALIVE), {"0": (0, 1, 2, 3)}, NOW, 10.0)
    assert (alert.rule, alert.rank) == ("collective_failed", 3)
    assert group_alerts("job", GROUP, job(ProbeState.DEAD), {"0": (0, 1, 2, 3)}, NOW, 10.0) == []
