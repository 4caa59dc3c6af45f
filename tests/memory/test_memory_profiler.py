"""MemoryProfiler, tracemalloc suspects, oom_guard and profile_memory_usage in this process."""

from __future__ import annotations

import json
import os
import tracemalloc

import psutil
import pytest
import torch
from torch import nn

import rankscope
from rankscope.memory.model import MIB

DATA = os.path.join(os.path.dirname(__file__), "..", "data")


def test_snapshot_reads_process_node_and_model():
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 32)).sum().backward()
    optimizer.step()
    profiler = rankscope.MemoryProfiler(model, optimizer=optimizer, device="cpu")
    snap = profiler.take_snapshot(tag="after step", step=1)
    proc, vm = psutil.Process().memory_info(), psutil.virtual_memory()
    assert snap.rss == pytest.approx(proc.rss, rel=0.1)
    assert snap.node_total == vm.total
    assert snap.node_available == pytest.approx(vm.available, rel=0.2)
    assert snap.cuda is None and profiler.device is None
    param_bytes = sum(p.numel() * 4 for p in model.parameters())
    assert snap.params == param_bytes
    assert snap.grads == param_bytes
    # Adam keeps exp_avg and exp_avg_sq per parameter, and a 4-byte step counter
    assert snap.optimizer_state == 2 * param_bytes + 4 * len(list(model.parameters()))
    assert (snap.step, snap.tag) == (1, "after step")


def test_history_is_bounded_and_keeps_the_ends():
    profiler = rankscope.MemoryProfiler(max_snapshots=16)
    for i in range(40):
        profiler.take_snapshot(step=i)
    steps = [s.step for s in profiler.snapshots]
    assert len(steps) <= 16
    assert steps[0] == 0 and steps[-1] == 39
    assert steps == sorted(steps)
    assert profiler.thinned == 40 - len(steps)


def grow(kept: list[str], i: int) -> None:
    kept.append("L" * (256 * 1024) + str(i))  # the leaking line


def test_tracemalloc_suspect_is_the_leaking_line():
    with open(__file__) as f:
        lines = f.read().splitlines()
    leaking_line = next(
        n for n, line in enumerate(lines, start=1) if line.endswith("# the leaking line")
    )
    kept: list[str] = []
    was_tracing = tracemalloc.is_tracing()
    with rankscope.MemoryProfiler(track_allocations=True) as profiler:
        for i in range(30):
            grow(kept, i)
            noise = [object() for _ in range(100)]
            del noise
            profiler.take_snapshot(step=i)
        report = profiler.leak_report()
        assert report.suspects, "no allocation site grew"
        top = report.suspects[0]
        assert top.location == f"{__file__}:{leaking_line}"
        assert top.size_diff >= 20 * 256 * 1024
        assert "the leaking line" in top.line
        assert f"top suspect {top.location}" in report.summary()
        tracemalloc_series = [s.tracemalloc_current for s in profiler.snapshots]
        assert all(v is not None for v in tracemalloc_series)
    assert tracemalloc.is_tracing() == was_tracing  # the profiler stopped what it started


def test_memory_command_reuses_the_suspects_within_the_interval(monkeypatch):
    """`memory --watch` asks every 2 s: one tracemalloc comparison serves every request until
    the interval has passed; the profiler counts the snapshots it takes."""
    from rankscope.config import Config
    from rankscope.memory.model import RankMemoryReply
    from rankscope.memory.worker import current_memory
    from rankscope.runtime.probe import Probe
    from rankscope.runtime.protocol import Command

    monkeypatch.setenv("RANKSCOPE_SUSPECTS_INTERVAL", "3600")
    kept: list[str] = []
    with rankscope.MemoryProfiler(track_allocations=True) as profiler:
        for i in range(10):
            grow(kept, i)
            profiler.take_snapshot(step=i)
        assert profiler.tracemalloc_snapshots == 1  # the baseline, when the warm-up ended
        assert profiler.suspects_age_s is None
        probe = Probe(Config.from_env(handler_budget=60.0))  # the probe's own dispatch
        replies = []
        for i in range(3):
            grow(kept, 100 + i)  # more growth between requests: not seen until recomputed
            reply = probe.run_command(Command(f"memory-{i}", "memory", {}))
            assert reply.ok, reply.error
            assert isinstance(reply.payload, RankMemoryReply)
            replies.append(reply.payload)
        probe.stop()
        assert profiler.tracemalloc_snapshots == 2  # one comparison for three requests
        first = replies[0].suspects
        assert first and first[0].line.endswith("# the leaking line")
        assert all(r.suspects == first for r in replies)
        assert all(r.has_profiler and r.snapshot.rss > 0 for r in replies)
        assert profiler.suspects_age_s is not None and profiler.suspects_age_s >= 0

        fresh = current_memory(suspects_max_age_s=0).suspects  # 0: compare every time
        assert profiler.tracemalloc_snapshots == 3
        assert fresh[0].location == first[0].location
        assert fresh[0].size_diff > first[0].size_diff  # the growth since, now seen
        assert profiler.leak_report().suspects[0].size_diff == fresh[0].size_diff
        assert profiler.tracemalloc_snapshots == 4  # leak_report() alone never reuses

        assert isinstance(profiler.leak_detected, bool)
        assert profiler.tracemalloc_snapshots == 4  # the yes/no takes no snapshot


def test_the_probes_leak_test_is_reused_for_ten_times_what_it_took(monkeypatch):
    """Over a long history the leak test takes hundreds of ms: `--watch` must not rerun it
    every 2 s. The probe's path reuses it; `leak_report()` alone always tests afresh."""
    import rankscope.memory.worker_profiler as profiler_module

    with rankscope.MemoryProfiler() as profiler:
        for i in range(5):
            profiler.take_snapshot(step=i)
        monkeypatch.setattr(profiler_module, "SUSPECTS_COST_FACTOR", 1e9)  # "it took long"
        assert profiler.leak_report(suspects_max_age_s=10).snapshots == 5
        profiler.take_snapshot(step=5)
        assert profiler.leak_report(suspects_max_age_s=10).snapshots == 5  # reused
        assert profiler.leak_report().snapshots == 6  # no reuse asked: tested afresh
        monkeypatch.setattr(profiler_module, "SUSPECTS_COST_FACTOR", 0.0)  # "it was quick"
        profiler.take_snapshot(step=6)
        assert profiler.leak_report(suspects_max_age_s=10).snapshots == 7


# ------------------------------------------------------------------ oom_guard
def test_memory_error_writes_a_verdict_and_reraises(tmp_path):
    guard = rankscope.oom_guard(tmp_path)
    with pytest.raises(MemoryError) as info, guard:
        raise MemoryError("cannot allocate 64 GiB")
    (written,) = tmp_path.glob("oom-*.json")
    verdict = json.loads(written.read_text())
    assert verdict["error_type"] == "MemoryError"
    assert verdict["findings"][0]["verdict"] == "host_exhausted"
    assert verdict["snapshot"]["rss"] > 0 and verdict["snapshot"]["node_total"] > 0
    assert "test_memory_profiler.py" in verdict["where"]
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "host_exhausted" in notes and str(written) in notes
    assert guard.last_report is not None and guard.last_report.path == str(written)


def test_oom_reports_are_private(tmp_path):
    folder = tmp_path / "new" / "ooms"
    old = os.umask(0o022)  # the usual umask would leave them world-readable
    try:
        with pytest.raises(MemoryError), rankscope.oom_guard(folder):
            raise MemoryError("cannot allocate 64 GiB")
    finally:
        os.umask(old)
    (written,) = folder.glob("oom-*.json")
    assert os.stat(written).st_mode & 0o777 == 0o600
    assert os.stat(folder).st_mode & 0o777 == 0o700
    assert os.stat(folder.parent).st_mode & 0o777 == 0o700


def handmade_oom_message(name: str) -> str:
    with open(os.path.join(DATA, f"cuda_memory_stats_{name}.json")) as f:
        return json.load(f)["oom_message"]


def test_cuda_oom_as_decorator_finds_fragmentation(tmp_path):
    target = tmp_path / "verdict.json"

    @rankscope.oom_guard(target)
    def step() -> None:
        raise torch.OutOfMemoryError(handmade_oom_message("fragmented"))

    with pytest.raises(torch.OutOfMemoryError):
        step()
    verdict = json.loads(target.read_text())
    (finding,) = verdict["findings"]
    assert finding["verdict"] == "fragmentation"
    assert "asked for 3.5 GiB while 18.0 GiB was reserved by PyTorch" in finding["message"]
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in finding["advice"]
    assert verdict["parsed"]["requested"] == int(3.5 * 1024**3)


class Exploding(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise torch.OutOfMemoryError(handmade_oom_message("outside_pytorch"))


def test_oom_in_forward_also_blames_activations(tmp_path):
    with pytest.raises(torch.OutOfMemoryError), rankscope.oom_guard(tmp_path) as guard:
        nn.Sequential(Exploding())(torch.ones(2))
    assert guard.last_report is not None
    assert guard.last_report.phase == "forward"
    found = [f.verdict.value for f in guard.last_report.findings]
    assert found == ["outside_pytorch", "activations"]


def test_other_errors_pass_untouched(tmp_path, monkeypatch):
    monkeypatch.setenv("RANKSCOPE_RUN_DIR", str(tmp_path))
    with pytest.raises(ValueError), rankscope.oom_guard():
        raise ValueError("not memory")
    assert not list(tmp_path.rglob("*.json"))
    with pytest.raises(MemoryError), rankscope.oom_guard():
        raise MemoryError
    assert len(list(tmp_path.rglob("oom-*.json"))) == 1  # under the run directory


# ------------------------------------------------------- profile_memory_usage
class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(64, 64)
        self.big = nn.Sequential(nn.Linear(64, 4096), nn.GELU(), nn.Linear(4096, 64))
        self.head = nn.Linear(64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.big(self.embed(x)))


def test_profile_memory_usage_names_the_module_to_checkpoint():
    torch.manual_seed(0)
    model = Net()
    batch = torch.randn(256, 64)
    profile = rankscope.profile_memory_usage(model, batch, loss_fn=lambda out: out.sum())
    assert [p.name for p in profile.phases] == ["forward", "backward"]
    modules = {m.name: m for m in profile.modules}
    assert set(modules) == {"embed", "big", "head"}
    hidden = 256 * 4096 * 4  # one (batch, 4096) float32 activation
    assert modules["big"].activations >= 2 * hidden
    assert modules["embed"].activations < hidden // 8
    assert modules["big"].params == (64 * 4096 + 4096 + 4096 * 64 + 64) * 4
    assert profile.largest_module is not None and profile.largest_module.name == "big"
    assert all(p.grad is None for p in model.parameters())  # left as they were
    text = str(profile)
    assert "largest activations: big" in text
    assert profile.source in ("host VmHWM", "host RSS")
    if profile.source == "host VmHWM":
        assert profile.phases[0].peak_increase >= MIB  # the (256, 4096) activations
