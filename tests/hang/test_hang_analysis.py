"""Hang analysis on synthetic per-rank records (no Ray), and the recorder in this process."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.distributed as dist

from rankscope.hang.analysis import RankEvidence, analyze_hang
from rankscope.hang.model import CallState, CollectiveRecord, DeathKind, FindingKind
from rankscope.hang.worker_callsite import error_text
from rankscope.hang.worker_recorder import (
    collective_recorder,
    record_collectives,
    stop_recording,
)

NOW = 1_000.0


def _rec(
    seq: int,
    op: str = "all_reduce",
    shape=(1048576,),
    state=CallState.COMPLETED,
    start: float = 900.0,
    group: str = "0",
) -> CollectiveRecord:
    return CollectiveRecord(
        group,
        seq,
        op,
        (shape,),
        ("float32",),
        start,
        None if state is CallState.STARTED else start + 0.1,
        state,
        "train.py:88",
    )


def _rank(rank: int, records, where=None, groups=None, **kw) -> RankEvidence:
    return RankEvidence(rank, tuple(records), groups or {"0": (0, 1, 2, 3)}, where, **kw)


def test_the_issue_example_word_for_word():
    waiting = [_rec(1042), _rec(1043, state=CallState.STARTED, start=NOW - 12.4)]
    evidence = [_rank(r, waiting) for r in range(3)]
    evidence.append(_rank(3, [_rec(1042)], where="load_batch data.py:41"))

    report = analyze_hang("j", evidence, NOW)

    [finding] = report.findings
    assert finding.kind is FindingKind.HANG and finding.ranks == (3,) and finding.seq == 1043
    assert finding.message == (
        "group 0 (4 ranks): ranks 0-2 wait in all_reduce #1043 (float32[1048576]) for 12.4 s; "
        "rank 3 never entered #1043, its last completed collective is #1042; "
        "rank 3 is in load_batch data.py:41"
    )


def test_a_short_wait_is_not_a_hang():
    evidence = [_rank(r, [_rec(7, state=CallState.STARTED, start=NOW - 0.2)]) for r in range(3)]
    evidence.append(_rank(3, [_rec(6)]))
    assert analyze_hang("j", evidence, NOW, min_wait_s=5.0).ok


def test_different_op_at_one_sequence_number():
    evidence = [_rank(r, [_rec(5)]) for r in (0, 1, 3)]
    evidence.append(_rank(2, [_rec(5, op="all_gather")]))
    [finding] = analyze_hang("j", evidence, NOW).findings
    assert finding.kind is FindingKind.MISMATCH and finding.ranks == (2,)
    assert "rank 2 called all_gather where ranks 0,1,3 called all_reduce" in finding.message


def test_cross_group_deadlock():
    groups = {"1": (0, 1), "2": (0, 1)}
    a = _rank(0, [_rec(3, group="1", state=CallState.STARTED, start=NOW - 30)], groups=groups)
    b = _rank(1, [_rec(3, group="2", state=CallState.STARTED, start=NOW - 30)], groups=groups)
    kinds = [f.kind for f in analyze_hang("j", [a, b], NOW).findings]
    assert kinds.count(FindingKind.HANG) == 2 and FindingKind.CROSS_GROUP in kinds


def test_dead_rank_with_its_last_words():
    evidence = [
        _rank(0, [_rec(9)]),
        _rank(
            1,
            [_rec(9)],
            where="forward model.py:12",
            dead=True,
            death="Ray: worker died (SYSTEM_ERROR)",
            last_seen=NOW - 4,
        ),
    ]
    [finding] = analyze_hang("j", evidence, NOW).findings
    assert finding.kind is FindingKind.DEAD and finding.ranks == (1,)
    assert finding.message == (
        "rank 1 is dead (last heard 4.0 s ago): Ray: worker died (SYSTEM_ERROR); its last "
        "collective: all_reduce #9 in group 0 (completed); it was last in forward model.py:12"
    )


def test_recorder_sees_sync_async_and_subgroup_calls(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rdv", rank=0, world_size=1)
    record_collectives()
    try:
        start = collective_recorder().total
        dist.all_reduce(torch.ones(3))
        work = dist.all_reduce(torch.ones(2, 2, dtype=torch.float16), async_op=True)
        pending = collective_recorder().snapshot().records[-1]
        work.wait()
        sub = dist.new_group([0])
        dist.broadcast(torch.zeros(5, dtype=torch.int64), src=0, group=sub)
        dist.barrier()
        records = collective_recorder().snapshot().records[-(collective_recorder().total - start) :]
    finally:
        stop_recording()
        dist.destroy_process_group()
    assert pending.state is CallState.STARTED  # async: running until wait() returns
    assert [(r.op, r.state, r.tensors) for r in records] == [
        ("all_reduce", CallState.COMPLETED, "float32[3]"),
        ("all_reduce", CallState.COMPLETED, "float16[2,2]"),
        ("broadcast", CallState.COMPLETED, "int64[5]"),
        ("barrier", CallState.COMPLETED, ""),
    ]
    default = [r.seq for r in records if r.group == records[0].group]
    assert default == sorted(default) and len(set(default)) == 3  # one sequence per group
    assert records[2].group != records[0].group
    assert records[0].caller.endswith(
        f"test_hang_analysis.py:{_line('dist.all_reduce(torch.ones(3))')}"
    )


def _line(text: str) -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if text in line and "_line(" not in line)


def test_ring_keeps_the_last_calls_and_ignores_late_completions(tmp_path):
    from rankscope.hang.worker_recorder import CollectiveRecorder

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rdv", rank=0, world_size=1)
    try:
        ring = CollectiveRecorder(capacity=4)
        world = dist.group.WORLD
        slots = [
            ring.begin("all_reduce", False, world, [torch.ones(i + 1)], ("t.py", i))
            for i in range(6)
        ]
        first_entry, first_generation = slots[0]
        first_entry.finish(CallState.COMPLETED, first_generation)  # its slot now holds call 4
        snapshot = ring.snapshot()
    finally:
        dist.destroy_process_group()
    assert [r.caller for r in snapshot.records] == ["t.py:2", "t.py:3", "t.py:4", "t.py:5"]
    assert [r.tensors for r in snapshot.records][-1] == "float32[6]"
    assert snapshot.dropped == 2
    assert all(r.state is CallState.STARTED for r in snapshot.records)


def _failed(seq: int, error: str = "Connection closed by peer [127.0.0.1]:43437"):
    return dataclasses.replace(_rec(seq, shape=(8,), state=CallState.FAILED), error=error)


def test_a_failed_collective_is_not_never_entered_and_a_dead_rank_is_not_waiting():
    """verl, one rank os._exit(1)s before #3: gloo raises in the others' all_reduce."""
    failed = [_rec(2, shape=(8,)), _failed(3)]
    evidence = [_rank(r, failed) for r in (0, 1, 3)]
    evidence.append(_rank(2, [_rec(2, shape=(8,))], where="wait_for_release job.py:21", dead=True))

    report = analyze_hang("j", evidence, NOW)

    [failure] = [f for f in report.findings if f.kind is FindingKind.FAILED]
    assert failure.message == (
        "group 0 (4 ranks): ranks 0,1,3 failed in all_reduce #3 (float32[8]): Connection closed "
        "by peer [127.0.0.1]:43437; rank 2 never entered #3, its last completed collective is #2; "
        "rank 2 is dead"
    )
    assert failure.ranks == (2,)
    assert not [f for f in report.findings if f.kind is FindingKind.HANG]
    assert report.groups[0].waiting == ()


def test_a_dead_rank_with_an_unfinished_call_does_not_wait():
    started = [_rec(4, state=CallState.STARTED, start=NOW - 30)]
    evidence = [_rank(0, started, dead=True), _rank(1, [_rec(3)])]
    report = analyze_hang("j", evidence, NOW, min_wait_s=1.0)
    assert [f.kind for f in report.findings] == [FindingKind.DEAD]
    assert report.groups[0].waiting == ()


def test_the_rank_that_died_first_is_named_and_how_the_others_followed():
    """Ray Train: rank 2 exits, then the controller kills the other workers with ray.kill."""
    killed = {"dead": True, "death_kind": DeathKind.KILLED, "death": "Ray: killed with ray.kill"}
    evidence = [
        _rank(0, [_rec(2)], died_at=NOW - 10.0, **killed),
        _rank(1, [_rec(2)], died_at=NOW - 9.5, **killed),
        _rank(
            2,
            [_rec(2)],
            dead=True,
            death_kind=DeathKind.EXITED,
            death="Ray: worker died (SYSTEM_ERROR): Worker unexpectedly exits.",
            died_at=NOW - 12.0,
        ),
    ]
    [first] = [
        f for f in analyze_hang("j", evidence, NOW).findings if f.kind.value == "first_death"
    ]
    assert first.ranks == (2,)
    assert first.message == (
        "rank 2 died first: Ray: worker died (SYSTEM_ERROR): Worker unexpectedly exits.; "
        "ranks 0,1 were killed with ray.kill (a controller or the driver ends the group when "
        "one worker fails) within 2.5 s after it"
    )


def test_one_dead_rank_has_no_first_death_finding():
    evidence = [_rank(0, [_rec(1)]), _rank(1, [_rec(1)], dead=True)]
    assert FindingKind.FIRST_DEATH not in [
        f.kind for f in analyze_hang("j", evidence, NOW).findings
    ]


def test_the_error_text_drops_the_cpp_location_and_keeps_the_first_sentence():
    gloo = RuntimeError(
        "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection "
        "closed by peer [127.0.0.1]:43437. This is typically caused by a remote worker crashing."
    )
    assert error_text(gloo) == "Connection closed by peer [127.0.0.1]:43437"
    assert error_text(KeyboardInterrupt()) == "KeyboardInterrupt"
    assert len(error_text(RuntimeError("x" * 500))) == 200


def test_recorder_keeps_the_reason_of_a_call_that_raised(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rdv", rank=0, world_size=1)
    record_collectives()
    try:
        with pytest.raises(RuntimeError, match="invalid root rank"):
            dist.broadcast(torch.ones(2), src=7)  # the backend itself refuses it
        [record] = collective_recorder().snapshot(last=1).records
    finally:
        stop_recording()
        dist.destroy_process_group()
    assert record.op == "broadcast" and record.state is CallState.FAILED
    assert record.error == "ProcessGroupGloo::broadcast: invalid root rank: 7"


def test_a_rank_killed_inside_the_failed_collective_is_not_a_culprit():
    evidence = [_rank(r, [_rec(2, shape=(8,)), _failed(3)]) for r in (1, 3)]
    evidence.append(
        _rank(0, [_rec(2, shape=(8,)), _rec(3, shape=(8,), state=CallState.STARTED)], dead=True)
    )
    evidence.append(_rank(2, [_rec(2, shape=(8,))], dead=True))
    [failure] = [f for f in analyze_hang("j", evidence, NOW).findings if f.kind.value == "failed"]
    assert failure.ranks == (2,)
    assert "; rank 0 was in #3 when it died; rank 2 never entered #3" in failure.message


class _FakeDeviceEvent:
    """Stands in for a CUDA event on this CPU machine: fires when the test says so."""

    fired = False

    def query(self) -> bool:
        return _FakeDeviceEvent.fired


def test_device_backends_complete_when_their_event_fires_not_when_the_call_returns(tmp_path):
    """NCCL enqueues and returns: a collective stuck on the GPU must not look completed."""
    from rankscope.hang.worker_recorder import CollectiveRecorder

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rdv", rank=0, world_size=1)
    try:
        ring = CollectiveRecorder()
        ring.device_backends, ring.make_event = ("gloo",), _FakeDeviceEvent
        entry, generation = ring.begin("all_reduce", False, None, [torch.ones(2)], ("t.py", 1))
        ring.returned(entry, generation)
        _FakeDeviceEvent.fired = False
        [running] = ring.snapshot().records
        stuck = ring.in_flight(older_than=running.start + 1)
        _FakeDeviceEvent.fired = True
        [done] = ring.snapshot().records
    finally:
        dist.destroy_process_group()
    assert running.state is CallState.STARTED and running.end is None
    assert stuck is not None and stuck.seq == running.seq  # what the watchdog sees
    assert done.state is CallState.COMPLETED and done.end is not None
