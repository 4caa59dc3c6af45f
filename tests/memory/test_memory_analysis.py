"""The memory verdicts on synthetic series and on torch.cuda.memory_stats dicts in torch's format.

No GPU is needed: the CUDA reader is a pure function of the stats dict, tested here against
tests/data/cuda_memory_stats_*.json (torch 2.x key names).
"""

from __future__ import annotations

import json
import math
import os
import random

import pytest

from rankscope.memory import analysis
from rankscope.memory.analysis import Verdict
from rankscope.memory.model import GIB, MIB, CudaMemory, MemorySnapshot
from rankscope.memory.worker_snapshot import cuda_memory_from_stats

DATA = os.path.join(os.path.dirname(__file__), "..", "data")
NODE = 64 * GIB


def handmade(name: str) -> dict:
    """A torch.cuda.memory_stats() fixture written by hand (not captured on a GPU)."""
    with open(os.path.join(DATA, f"cuda_memory_stats_{name}.json")) as f:
        return json.load(f)


def cuda_of(name: str) -> CudaMemory:
    rec = handmade(name)
    free, total = rec["mem_get_info"]
    return cuda_memory_from_stats(rec["memory_stats"], device=rec["device"], free=free, total=total)


def series(values: list[float], *, step_s: float = 0.5, cuda: list[int] | None = None):
    out = []
    for i, v in enumerate(values):
        c = None
        if cuda is not None:
            b = cuda[i]
            c = CudaMemory(0, b, b, b, 0, b, b, 0, 0, b, 80 * GIB)
        out.append(
            MemorySnapshot(
                time=1000.0 + i * step_s,
                pid=1,
                rss=int(v),
                anon=int(v),
                node_total=NODE,
                node_available=NODE - 8 * GIB,
                step=i,
                cuda=c,
            )
        )
    return out


def noisy(base: float, slope: float, n: int, noise: float, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [base + slope * i + rng.uniform(-noise, noise) for i in range(n)]


# --------------------------------------------------------------------- trend
def test_theil_sen_ignores_outliers():
    xs = list(range(20))
    ys = [3.0 * x + 10 for x in xs]
    ys[7] = 10_000.0  # one wild sample
    slope, intercept = analysis.theil_sen(xs, ys)
    assert slope == pytest.approx(3.0)
    assert intercept == pytest.approx(10.0)


def test_kendall_tau_of_monotone_and_flat():
    assert analysis.kendall_tau([1, 2, 3, 4], [1, 2, 3, 4]) == 1.0
    assert analysis.kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    assert analysis.kendall_tau([1, 2, 3, 4], [5, 5, 5, 5]) == 0.0


def test_steady_leak_found_with_its_rate():
    snaps = series(noisy(900 * MIB, 2 * MIB, 60, 0.5 * MIB))
    f = analysis.detect_leak("rss", snaps)
    assert f.leak, f.reason
    assert f.per_step == pytest.approx(2 * MIB, rel=0.05)
    assert f.per_second == pytest.approx(4 * MIB, rel=0.05)  # two steps a second
    assert f.seconds_to_full == pytest.approx((NODE - 8 * GIB) / (4 * MIB), rel=0.06)
    assert f.since_step == 5  # after the warm-up
    assert "process RSS leaks 2.0 MiB/step" in analysis.describe_leak(f)


def test_flat_noisy_series_is_not_a_leak():
    f = analysis.detect_leak("rss", series(noisy(900 * MIB, 0, 60, 3 * MIB)))
    assert not f.leak
    assert "over the window" in f.reason or "baseline" in f.reason


def test_sawtooth_returning_to_baseline_is_not_a_leak():
    values = [500 * MIB + (i % 8) * 16 * MIB for i in range(64)]
    f = analysis.detect_leak("rss", series(values))
    assert not f.leak, f.reason


def test_sawtooth_whose_floor_climbs_is_a_leak():
    # activations come and go every 8 steps, but 1 MiB per step stays behind
    values = [500 * MIB + (i % 8) * 64 * MIB + i * MIB for i in range(96)]
    f = analysis.detect_leak("rss", series(values))
    assert f.leak, f.reason
    assert f.tau < analysis.LeakThresholds().min_tau  # found by the rising floor, not tau
    assert f.per_step == pytest.approx(MIB, rel=0.2)


@pytest.mark.parametrize("rise_at", [9, 16, 24, 40])
def test_one_off_rise_in_a_sawtooth_is_not_a_leak(rise_at):
    # CI saw this on a loaded node: the probe's first heartbeat lifted RSS 5 MiB mid-run once
    values = [
        140 * MIB + ((i + 1) % 6) * 2 * MIB + (5 * MIB if i >= rise_at else 0) for i in range(60)
    ]
    f = analysis.detect_leak("rss", series(values))
    assert not f.leak, f.reason


def test_leak_that_starts_late_reports_where_and_how_fast():
    values = [700 * MIB] * 50 + [700 * MIB + (i + 1) * 3 * MIB for i in range(50)]
    snaps = series([v + n for v, n in zip(values, noisy(0, 0, 100, 0.2 * MIB), strict=True)])
    f = analysis.detect_leak("rss", snaps)
    assert f.leak
    assert f.per_step == pytest.approx(3 * MIB, rel=0.1)
    assert f.since_step == pytest.approx(50, abs=2)


def test_too_few_snapshots_give_no_verdict():
    f = analysis.detect_leak("rss", series([float(i * MIB) for i in range(9)]))
    assert not f.leak
    assert "need 8" in f.reason


def test_small_growth_is_noise():
    f = analysis.detect_leak("rss", series([1000 * MIB + i * 1024 for i in range(50)]))
    assert not f.leak
    assert "< 5.0 MiB" in f.reason  # half a percent of ~1000 MiB beats the 4 MiB floor


def test_cuda_allocated_leak_counts_the_cache_as_room():
    allocated = [int(20 * GIB + i * 64 * MIB) for i in range(40)]
    snaps = series([900 * MIB] * 40, cuda=allocated)
    leaks = {f.metric: f for f in analysis.detect_leaks(snaps)}
    assert set(leaks) == {"rss", "cuda_allocated", "cuda_reserved", "device_used"}
    assert leaks["cuda_allocated"].leak and not leaks["rss"].leak
    assert leaks["cuda_allocated"].capacity_left == 80 * GIB - allocated[-1]


def test_thresholds_validate_themselves():
    with pytest.raises(ValueError, match="min_points"):
        analysis.LeakThresholds(min_points=2)
    with pytest.raises(ValueError, match="device_alert"):
        analysis.MemoryThresholds(device_alert=1.5)


# --------------------------------------------------------------- CUDA stats
def test_stats_reader_uses_torch_key_names():
    c = cuda_of("fragmented")
    stats = handmade("fragmented")["memory_stats"]
    assert c.allocated == stats["allocated_bytes.all.current"]
    assert c.reserved == stats["reserved_bytes.all.current"]
    assert c.active == stats["active_bytes.all.current"]
    assert c.inactive_split == stats["inactive_split_bytes.all.current"]
    assert c.peak_allocated == stats["allocated_bytes.all.peak"]
    assert (c.num_alloc_retries, c.num_ooms) == (37, 1)
    assert c.device_total == 85029158912
    assert c.device_used == c.device_total - handmade("fragmented")["mem_get_info"][0]


def test_unused_allocator_reads_as_zero():
    c = cuda_memory_from_stats({}, device=0, free=80 * GIB, total=80 * GIB)
    assert (c.allocated, c.reserved, c.device_used) == (0, 0, 0)


def verdicts(c: CudaMemory) -> set[Verdict]:
    snap = MemorySnapshot(0.0, 1, GIB, GIB, NODE, NODE // 2, cuda=c)
    return {f.verdict for f in analysis.snapshot_findings(snap)}


def test_fragmented_device():
    assert verdicts(cuda_of("fragmented")) == {Verdict.FRAGMENTATION, Verdict.DEVICE_HIGH}


def test_memory_outside_pytorch():
    found = verdicts(cuda_of("outside_pytorch"))
    assert found == {Verdict.OUTSIDE_PYTORCH, Verdict.DEVICE_HIGH}


def test_healthy_device_has_no_finding():
    assert verdicts(cuda_of("healthy")) == set()


def test_fragmentation_message_has_the_numbers():
    snap = MemorySnapshot(0.0, 1, GIB, GIB, NODE, NODE // 2, cuda=cuda_of("fragmented"))
    (frag,) = [f for f in analysis.snapshot_findings(snap) if f.verdict == Verdict.FRAGMENTATION]
    assert "reserved 72.9 GiB but allocated 48.3 GiB" in frag.message
    assert "37 allocation retries" in frag.message
    assert "expandable_segments:True" in frag.advice


# -------------------------------------------------------------------- OOMs
def test_parse_torch2_oom_message():
    p = analysis.parse_cuda_oom(handmade("fragmented")["oom_message"])
    assert p is not None
    assert p.requested == int(3.5 * GIB)
    assert p.total == pytest.approx(79.19 * GIB, rel=1e-6)
    assert p.allocated == pytest.approx(58.02 * GIB, rel=1e-6)
    assert p.reserved_unallocated == pytest.approx(17.98 * GIB, rel=1e-6)
    assert p.other_processes == 0


def test_parse_torch1_oom_message():
    msg = (
        "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; "
        "14.21 GiB already allocated; 19.75 MiB free; 14.52 GiB reserved in total by PyTorch)"
    )
    p = analysis.parse_cuda_oom(msg)
    assert p is not None
    assert p.requested == 20 * MIB
    assert p.total == pytest.approx(15.78 * GIB, rel=1e-6)
    assert p.reserved_unallocated == pytest.approx((14.52 - 14.21) * GIB, rel=1e-3)


def test_not_an_oom_message():
    assert analysis.parse_cuda_oom("CUDA error: an illegal memory access") is None


def oom(name: str, phase: str | None = None) -> tuple[Verdict, ...]:
    rec = handmade(name)
    evidence = analysis.OomEvidence("OutOfMemoryError", rec["oom_message"], None, phase)
    return tuple(f.verdict for f in analysis.classify_oom(evidence))


def test_oom_from_fragmentation():
    assert oom("fragmented") == (Verdict.FRAGMENTATION,)


def test_oom_from_memory_outside_pytorch():
    assert oom("outside_pytorch") == (Verdict.OUTSIDE_PYTORCH,)


def test_oom_in_backward_blames_activations_too():
    assert oom("fragmented", "backward") == (Verdict.FRAGMENTATION, Verdict.ACTIVATIONS)


def test_oom_with_nothing_else_is_tensors_filling_the_device():
    msg = (
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB "
        "of which 1.00 GiB is free. Including non-PyTorch memory, this process has 78.17 GiB "
        "memory in use. Of the allocated memory 77.50 GiB is allocated by PyTorch, and "
        "100.00 MiB is reserved by PyTorch but unallocated."
    )
    (f,) = analysis.classify_oom(analysis.OomEvidence("OutOfMemoryError", msg, None))
    assert f.verdict == Verdict.TENSORS_FILL_DEVICE
    assert "77.5 GiB of 79.2 GiB" in f.message


def test_host_memory_error():
    snap = MemorySnapshot(0.0, 1, 30 * GIB, 30 * GIB, NODE, GIB)
    (f,) = analysis.classify_oom(analysis.OomEvidence("MemoryError", "", snap))
    assert f.verdict == Verdict.HOST_EXHAUSTED
    assert "1.0 GiB of 64.0 GiB available" in f.message


def test_phase_from_traceback_frames():
    backward = [("train", "/u/train.py"), ("backward", "/site-packages/torch/_tensor.py")]
    forward = [("train", "/u/train.py"), ("_call_impl", "/site-packages/torch/nn/modules/m.py")]
    assert analysis.phase_of(backward) == "backward"
    assert analysis.phase_of(forward) == "forward"
    assert analysis.phase_of([("train", "/u/train.py")]) is None


# ------------------------------------------------------------ cluster view
def test_cluster_view_sorts_by_headroom_and_alerts():
    def row(rank: int, node_available: int, cuda: CudaMemory | None) -> analysis.RankMemory:
        s = MemorySnapshot(0.0, 100 + rank, GIB, GIB, NODE, node_available, cuda=cuda)
        return analysis.RankMemory(f"rank {rank}", rank, "10.0.0.1", 100 + rank, s)

    rows = [
        row(0, NODE // 2, cuda_of("healthy")),
        row(1, NODE // 2, cuda_of("fragmented")),
        row(2, int(NODE * 0.05), None),  # host 95% used
        analysis.RankMemory("rank 3", 3, "10.0.0.2", 103, None, error="process is dead"),
    ]
    view = analysis.cluster_view("job1", rows)
    assert [r.rank for r in view.ranks] == [2, 1, 0, 3]
    assert {(r.rank, f.verdict) for r, f in view.alerts} == {
        (2, Verdict.HOST_HIGH),
        (1, Verdict.DEVICE_HIGH),
        (1, Verdict.FRAGMENTATION),
    }
    assert [r.rank for r in view.missing] == [3]
    assert view.has_findings
    assert math.isclose(view.ranks[0].headroom or 0, 0.05, rel_tol=1e-6)


def test_processes_without_a_rank_come_after_the_ranks_in_a_section_of_their_own():
    from rich.console import Console

    from rankscope.memory.render import render

    def row(rank: int | None, pid: int, node_available: int) -> analysis.RankMemory:
        s = MemorySnapshot(0.0, pid, GIB, GIB, NODE, node_available)
        label = f"rank {rank}" if rank is not None else f"pid {pid}@vm"
        return analysis.RankMemory(label, rank, "10.0.0.1", pid, s)

    controller = row(None, 900, int(NODE * 0.05))  # the least headroom, but not a rank
    view = analysis.cluster_view("job1", [controller, row(1, 101, NODE // 2), row(0, 100, NODE)])
    assert [r.rank for r in view.ranks] == [1, 0, None]

    console = Console(width=100, record=True, color_system=None)
    console.print(render(view))
    lines = console.export_text().splitlines()
    rank0 = next(i for i, line in enumerate(lines) if line.startswith("│    0 "))
    assert lines[rank0 + 1].startswith("├") and lines[rank0 + 2].startswith("│    - ")


def test_a_job_with_two_groups_of_ranks_shows_the_group_column():
    from rich.console import Console

    from rankscope.memory.render import render

    def row(rank: int, pid: int, group: str) -> analysis.RankMemory:
        s = MemorySnapshot(0.0, pid, GIB, GIB, NODE, NODE // 2)
        return analysis.RankMemory(f"rank {rank}", rank, "10.0.0.1", pid, s, group=group)

    view = analysis.cluster_view(
        "job1", [row(0, 100, "10.0.0.1:29500"), row(0, 200, "10.0.0.1:29600")]
    )
    console = Console(width=120, record=True, color_system=None)
    console.print(render(view))
    text = console.export_text()
    assert "┃ group " in text and "10.0.0.1:29500" in text and "10.0.0.1:29600" in text


def test_a_ranks_heartbeat_trend_is_leak_tested_only_over_its_training_and_only_when_large():
    from rankscope.memory.collect import _with_trend_leaks
    from rankscope.memory.model import MemorySnapshot, RankMemoryReply

    mib = 2**20

    def trend(rss_of_step: list[tuple[int, int]]) -> RankMemoryReply:
        snaps = tuple(
            MemorySnapshot(
                time=100.0 + i,
                pid=7,
                rss=rss,
                anon=rss,
                node_total=64 << 30,
                node_available=32 << 30,
                step=step,
            )
            for i, (step, rss) in enumerate(rss_of_step)
        )
        return RankMemoryReply(snaps[-1], history=snaps)

    start_up = [(0, (200 + 40 * i) * mib) for i in range(20)]  # imports, then the first batch
    flat = [(1 + i, 1000 * mib + (i % 3) * mib) for i in range(40)]
    leaking = [(1 + i, (1000 + 20 * i) * mib) for i in range(40)]
    [healthy] = _with_trend_leaks(trend(start_up + flat)).leaks
    assert not healthy.leak
    [leak] = _with_trend_leaks(trend(start_up + leaking)).leaks
    assert leak.leak and leak.metric == "rss"
    small = [(1 + i, (1000 + i) * mib) for i in range(40)]  # 40 MiB: under the trend's floor
    assert not any(f.leak for f in _with_trend_leaks(trend(small)).leaks)
