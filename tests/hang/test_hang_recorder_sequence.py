"""The recorder's sequence numbers through its per-group entries: torch's counter for
collectives, ours for point-to-point calls, and the default group read afresh when re-created."""

from __future__ import annotations

import torch
import torch.distributed as dist

from rankscope.hang.worker_callsite import _GroupMemberWorld, default_group_holder, default_pg_field
from rankscope.hang.worker_recorder import CollectiveRecorder
from rankscope.hang.worker_wrappers import wrap


def _all_reduce(tensor, op=None, group=None, async_op=False):  # type: ignore[no-untyped-def]
    return None


def _send(tensor, dst=None, group=None, tag=0):  # type: ignore[no-untyped-def]
    return None


def test_collectives_take_torchs_counter_and_p2p_calls_count_on_ours(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rdv", rank=0, world_size=1)
    try:
        recorder = CollectiveRecorder()  # the process's own also holds what dist.* records
        pg = dist.group.WORLD
        all_reduce = wrap("all_reduce", _all_reduce, recorder, False)
        send = wrap("send", _send, recorder, True)
        torch_seq = []
        for _ in range(3):
            torch_seq.append(pg._get_sequence_number_for_group() + 1)  # type: ignore[union-attr]
            all_reduce(torch.ones(2))
            send(torch.ones(1), 0)
            dist.all_reduce(torch.ones(1))  # torch's counter moves on between our calls
        records = recorder.snapshot(last=recorder.total).records
    finally:
        dist.destroy_process_group()
    reduced = [r.seq for r in records if r.op == "all_reduce"]
    sent = [r.seq for r in records if r.op == "send"]
    assert reduced == torch_seq
    assert sent == [sent[0], sent[0] + 1, sent[0] + 2]


def test_a_re_created_default_group_is_the_one_recorded(tmp_path):
    recorder = CollectiveRecorder()
    all_reduce = wrap("all_reduce", _all_reduce, recorder, False)
    groups = []
    for i in range(2):
        dist.init_process_group(
            "gloo", init_method=f"file://{tmp_path}/rdv{i}", rank=0, world_size=1
        )
        try:
            all_reduce(torch.ones(3))
            groups.append(dist.group.WORLD)
        finally:
            dist.destroy_process_group()
    first, second = groups
    assert first is not second
    assert set(all_reduce.__globals__["sites"]) == {first, second}  # one entry per group


def test_the_default_group_is_read_from_torchs_field_when_it_has_one():
    assert default_pg_field(default_group_holder()) in ("_default_pg", "default_pg")
    assert default_pg_field(_GroupMemberWorld()) == "default_pg"
