"""MemoryProfiler.take_snapshot cost, without and with tracemalloc, against the demo's step.

    .venv/bin/python benchmarks/bench_memory.py [--steps 300] [--rounds 5]

1. The cost of one snapshot (host path; CUDA is read only on a GPU) next to the stock way of
   reading the same numbers by hand (psutil's memory_info + virtual_memory, what DeepSpeed's
   see_memory_usage calls), and psutil's USS (memory_full_info).
2. The demo's training step (tiny MLP, SGD, gradients all-reduced over gloo, two ranks) with no
   profiler, one snapshot per step, and one snapshot per step with tracemalloc on. Modes are
   interleaved in rounds so drift hits them alike; medians per mode.
Goal: under 1% overhead at one snapshot per step without tracemalloc.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from collections.abc import Callable

MODES = ("none", "snapshot", "snapshot+tracemalloc")


def per_call_us(fn: Callable[[], object], n: int, repeats: int = 7) -> float:
    """Median over `repeats` of the mean time of `n` calls, in microseconds."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - started) / n * 1e6)
    return statistics.median(times)


def snapshot_costs() -> dict[str, float]:
    import psutil

    import rankscope

    process = psutil.Process()
    out = {}
    profiler = rankscope.MemoryProfiler(max_snapshots=1 << 20)
    out["take_snapshot"] = per_call_us(profiler.take_snapshot, 20000)
    out["psutil memory_info + virtual_memory"] = per_call_us(
        lambda: (process.memory_info(), psutil.virtual_memory()), 20000
    )
    out["psutil memory_full_info (USS)"] = per_call_us(process.memory_full_info, 200)
    with rankscope.MemoryProfiler(track_allocations=True, max_snapshots=1 << 20) as traced:
        out["take_snapshot with tracemalloc"] = per_call_us(traced.take_snapshot, 20000)
    return out


def cuda_costs() -> dict[str, float]:
    """On a GPU: snapshot cost with the CUDA reads, and a real fragmentation check."""
    import tempfile

    import torch

    import rankscope

    out: dict[str, float] = {}
    profiler = rankscope.MemoryProfiler(device=0, max_snapshots=1 << 20)
    out["take_snapshot (cuda:0)"] = per_call_us(profiler.take_snapshot, 5000)
    out["torch.cuda.memory_stats + mem_get_info"] = per_call_us(
        lambda: (torch.cuda.memory_stats(0), torch.cuda.mem_get_info(0)), 5000
    )
    # fragment the cache: many odd-sized blocks, free every other one
    blocks = [torch.empty(int((1 + i % 7) * 2**20 * 9.5), device="cuda") for i in range(400)]
    del blocks[::2]
    snap = profiler.take_snapshot(tag="fragmented")
    assert snap.cuda is not None
    print(
        f"  cuda after fragmenting: allocated {snap.cuda.allocated / 2**30:.2f} GiB, reserved "
        f"{snap.cuda.reserved / 2**30:.2f} GiB, inactive split "
        f"{snap.cuda.inactive_split / 2**30:.2f} GiB, driver used "
        f"{snap.cuda.device_used / 2**30:.2f} of {snap.cuda.device_total / 2**30:.2f} GiB"
    )
    print(f"  verdicts: {[f.verdict.value for f in profiler.findings()] or 'none'}")
    with rankscope.MemoryProfiler(device=0, track_allocations=True) as traced:
        x = [torch.empty(2**20, device="cuda") for _ in range(10)]
        traced.take_snapshot()
        path = traced.dump_allocation_history(os.path.join(tempfile.mkdtemp(), "viz.pickle"))
        print(f"  memory_viz snapshot: {path} ({os.path.getsize(path)} bytes)")
        del x
    return out


def _rank(rank: int, world: int, port: int, steps: int, rounds: int, results: object) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    import rankscope
    from rankscope.demo.train import train_step

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    inputs = torch.randn(16, 32)
    targets = inputs.sum(dim=1, keepdim=True) * 0.1
    for _ in range(50):  # warm up
        train_step(model, optimizer, inputs, targets)
    per_mode: dict[str, list[float]] = {m: [] for m in MODES}
    for _ in range(rounds):
        for mode in MODES:
            profiler = None
            if mode != "none":
                profiler = rankscope.MemoryProfiler(
                    track_allocations=mode.endswith("tracemalloc"), max_snapshots=1 << 20
                )
            dist.barrier()
            for step in range(steps):
                started = time.perf_counter()
                train_step(model, optimizer, inputs, targets)
                if profiler is not None:
                    profiler.take_snapshot(step=step)
                per_mode[mode].append(time.perf_counter() - started)
            if profiler is not None:
                profiler.close()
    if rank == 0:
        results.update({m: statistics.median(v) * 1e6 for m, v in per_mode.items()})  # type: ignore[attr-defined]
    dist.destroy_process_group()


def step_costs(steps: int, rounds: int) -> dict[str, float]:
    import warnings

    import torch.multiprocessing as mp

    warnings.filterwarnings("ignore")
    os.environ["PYTHONWARNINGS"] = "ignore"  # the spawned ranks too
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    manager = mp.Manager()
    results = manager.dict()
    mp.spawn(_rank, args=(2, port, steps, rounds, results), nprocs=2, join=True)
    return dict(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="steps per mode per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    costs = snapshot_costs()
    print("one call (median, microseconds):")
    for name, us in costs.items():
        print(f"  {name:<40} {us:9.2f} us")
    stock = costs["psutil memory_info + virtual_memory"]
    print(f"  take_snapshot / stock psutil pair:        {costs['take_snapshot'] / stock:9.2f}x")

    import torch

    if torch.cuda.is_available():
        print("\nCUDA:")
        for name, us in cuda_costs().items():
            print(f"  {name:<40} {us:9.2f} us")

    steps = step_costs(args.steps, args.rounds)
    base = steps["none"]
    print(f"\ndemo training step, 2 gloo ranks (median of {args.rounds}x{args.steps} steps):")
    for mode in MODES:
        print(f"  {mode:<24} {steps[mode]:9.1f} us/step  ({steps[mode] / base:5.3f}x)")
    overhead = costs["take_snapshot"] / base * 100
    traced = costs["take_snapshot with tracemalloc"] / base * 100
    print(f"\nsnapshot cost / step time: {overhead:.2f}% (goal < 1%)")
    print(
        f"with tracemalloc: {traced:.2f}% for the snapshot call, and the step itself runs "
        f"{steps['snapshot+tracemalloc'] / base:.2f}x (tracemalloc hooks every allocation)"
    )


if __name__ == "__main__":
    main()
