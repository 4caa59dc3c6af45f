"""torch's flight recorder: its dumps parsed, merged with rankscope's records, analysed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from rankscope.hang.analysis import RankEvidence, analyze_hang
from rankscope.hang.model import CallState, CollectiveRecord, FindingKind
from rankscope.hang.worker_flight import (
    FLIGHT_SOURCE,
    flight_groups,
    flight_recorder_enabled,
    merge_flight,
    parse_flight_dump,
)

NOW = 1_000.0


def _entry(seq: int, *, op="gloo:all_reduce", retired=True, state="scheduled", created=900.0):
    """One entry the way torch 2.13's `_dump_fr_trace_json` writes it."""
    return {
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "is_p2p": False,
        "process_group": ["0", "default_pg"],
        "profiling_name": op,
        "input_sizes": [[4]],
        "input_dtypes": ["Float"],
        "state": state,
        "retired": retired,
        "time_created_ns": int(created * 1e9),
        "time_discovered_completed_ns": 0,
    }


def _flight(*entries) -> tuple[CollectiveRecord, ...]:
    return tuple(parse_flight_dump({"version": "2.10", "entries": list(entries)}))


def test_entries_become_records_that_read_like_rankscopes_own():
    done, stuck = _flight(_entry(1), _entry(2, retired=False, created=NOW - 7))
    assert (done.group, done.seq, done.op, done.tensors) == ("0", 1, "all_reduce", "float32[4]")
    assert done.state is CallState.COMPLETED and done.source == FLIGHT_SOURCE
    assert stuck.state is CallState.STARTED and stuck.end is None
    assert stuck.start == NOW - 7


def test_nccl_entries_complete_when_their_cuda_event_fired():
    on_gpu, finished = _flight(
        _entry(5, op="nccl:all_reduce", retired=False, state="started"),
        _entry(4, op="nccl:all_reduce", retired=False, state="completed"),
    )
    assert on_gpu.state is CallState.STARTED
    assert finished.state is CallState.COMPLETED


def test_group_ranks_come_from_pg_config_when_torch_knows_them():
    dump = {
        "pg_config": {
            "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
            "": {"name": "", "desc": "", "ranks": "[]"},
        }
    }
    assert flight_groups(dump) == {"0": (0, 1, 2, 3)}


def test_merge_keeps_rankscopes_records_and_adds_only_the_calls_they_lack():
    own = CollectiveRecord("0", 1, "all_reduce", ((4,),), ("float32",), 1.0, 1.1,
                           CallState.COMPLETED, "train.py:9")  # fmt: skip
    merged = merge_flight([own], _flight(_entry(1), _entry(2, retired=False)))
    assert [(r.seq, r.source) for r in merged] == [(1, ""), (2, FLIGHT_SOURCE)]


def test_a_hang_seen_only_by_the_flight_recorder_names_the_absent_rank():
    waiting = _flight(_entry(1), _entry(2, retired=False, created=NOW - 9))
    behind = _flight(_entry(1))
    evidence = [
        RankEvidence(0, waiting, {"0": ()}),
        RankEvidence(1, waiting, {"0": ()}),
        RankEvidence(2, behind, {"0": ()}, where="load_batch data.py:41"),
    ]
    [finding] = analyze_hang("j", evidence, NOW).findings
    assert finding.kind is FindingKind.HANG and finding.ranks == (2,)
    assert "ranks 0,1 wait in all_reduce #2 (float32[4]) for 9.0 s" in finding.message
    assert "(seen by the torch flight recorder)" in finding.message
    assert "rank 2 never entered #2" in finding.message


def test_a_group_of_unknown_members_is_the_ranks_that_called_into_it():
    """A gloo subgroup: only its two members have entries; ranks 2-3 are not accused."""
    waiting = _flight(_entry(1, created=NOW - 9, retired=False))
    evidence = [RankEvidence(r, waiting, {"0": ()}) for r in (0, 1)]
    evidence += [RankEvidence(r, (), {}) for r in (2, 3)]
    assert analyze_hang("j", evidence, NOW).findings == ()


def test_two_recorders_naming_one_op_differently_is_not_a_mismatch():
    own = CollectiveRecord("0", 1, "all_gather_into_tensor", ((4,),), ("float32",), 1.0, 1.1,
                           CallState.COMPLETED, "train.py:9")  # fmt: skip
    other = _flight(_entry(1, op="gloo:_allgather_base"))
    evidence = [RankEvidence(0, (own,), {"0": (0, 1)}), RankEvidence(1, other, {"0": (0, 1)})]
    assert not [f for f in analyze_hang("j", evidence, NOW).findings if f.kind.value == "mismatch"]


def test_it_is_on_only_when_the_job_asks_torch_for_a_buffer():
    assert not flight_recorder_enabled({})
    assert not flight_recorder_enabled({"TORCH_FR_BUFFER_SIZE": "0"})
    assert not flight_recorder_enabled({"TORCH_FR_BUFFER_SIZE": "lots"})
    assert flight_recorder_enabled({"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"})


def test_a_real_gloo_process_reads_its_own_flight_recorder(tmp_path):
    """One real rank (world 1): torch's dump has the calls, with their seq and op."""
    script = textwrap.dedent(
        """
        import json, time, torch, torch.distributed as dist
        from rankscope.hang.worker_flight import read_flight_recorder
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
        for _ in range(3):
            dist.all_reduce(torch.ones(4))
        dist.broadcast(torch.ones(2), 0)
        for _ in range(100):  # gloo's work thread marks a call completed a moment later
            records, groups = read_flight_recorder()
            if all(r.state.value == "completed" for r in records):
                break
            time.sleep(0.05)
        print(json.dumps([[r.seq, r.op, r.tensors, r.state.value] for r in records]))
        dist.destroy_process_group()
        """
    )
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": "100"}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    records = json.loads(proc.stdout.strip().splitlines()[-1])
    assert records == [
        [1, "all_reduce", "float32[4]", "completed"],
        [2, "all_reduce", "float32[4]", "completed"],
        [3, "all_reduce", "float32[4]", "completed"],
        [4, "broadcast", "float32[2]", "completed"],
    ]
