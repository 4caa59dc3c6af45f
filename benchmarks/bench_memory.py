"""MemoryProfiler.take_snapshot cost, without and with tracemalloc, against the demo's step.

    .venv/bin/python benchmarks/bench_memory.py [--steps 300] [--rounds 5]
    .venv/bin/python benchmarks/bench_memory.py --only-watch [--watch-seconds 20] [--watch-rounds 3]

1. The cost of one snapshot (host path; CUDA is read only on a GPU) next to the stock way of
   reading the same numbers by hand (psutil's memory_info + virtual_memory, what DeepSpeed's
   see_memory_usage calls), and psutil's USS (memory_full_info).
2. The demo's training step (tiny MLP, SGD, gradients all-reduced over gloo, two ranks) with no
   profiler, one snapshot per step, and one snapshot per step with tracemalloc on. Modes are
   interleaved in rounds so drift hits them alike; medians per mode.
3. `rankscope memory --watch` against a training process: a CPU step (an MLP, one torch thread,
   a few ms) with MemoryProfiler(track_allocations=True) and a Python heap of --heap-objects
   lists allocated after tracing began (a tokenized dataset kept as lists), while a thread asks
   for `memory` every 2 s the way the probe gets it from `--watch` (no hub: the probe's own
   dispatch, `Probe.run_command`, is called directly). Modes: no requests; the command as it is
   (off the probe thread, suspects reused for RANKSCOPE_SUSPECTS_INTERVAL); the same with the
   reuse off (a tracemalloc comparison per request); and the former inline command (its
   comparison, `filter_traces` + `compare_to`, on every request: reproduced here as the
   baseline). Modes are interleaved in rounds of --watch-seconds each; medians per mode.
Goal: under 1% overhead at one snapshot per step without tracemalloc; the watched step within a
few % of the quiet one.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from collections.abc import Callable
from typing import Any

MODES = ("none", "snapshot", "snapshot+tracemalloc")
WATCH_MODES = ("no requests", "memory (reuse 10 s)", "memory (reuse off)", "before (inline)")
WATCH_INTERVAL_S = 2.0
"""`rankscope memory --watch` refreshes every 2 s."""


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


class StockMemoryCommand:
    """The `memory` command before the handler budget and the reuse, as it ran on the probe
    thread: the same reads and leak test, and a fresh tracemalloc comparison every time, made
    the way it was (filter every trace, then `compare_to` a filtered baseline snapshot)."""

    def __init__(self, profiler: object) -> None:
        import linecache
        import tracemalloc

        from rankscope.memory import worker_profiler as module

        self.profiler = profiler
        self.filters = [
            tracemalloc.Filter(False, tracemalloc.__file__),
            tracemalloc.Filter(False, "<frozen importlib._bootstrap*>"),
            tracemalloc.Filter(False, linecache.__file__),
            tracemalloc.Filter(False, os.path.join(os.path.dirname(module.__file__), "*")),
        ]
        self.baseline = tracemalloc.take_snapshot().filter_traces(self.filters)

    def __call__(self) -> object:
        from rankscope.memory import analysis
        from rankscope.memory import worker_snapshot as snap
        from rankscope.memory.model import RankMemoryReply

        p: Any = self.profiler
        now = snap.take_snapshot(tag="probe", uss=True)
        findings = analysis.detect_leaks(p.snapshots, p.leak_thresholds)
        return RankMemoryReply(now, has_profiler=True, leaks=findings, suspects=self.compare())

    def compare(self) -> tuple[Any, ...]:
        import linecache
        import tracemalloc

        from rankscope.memory.model import AllocationSite

        current = tracemalloc.take_snapshot().filter_traces(self.filters)
        stats = current.compare_to(self.baseline, "lineno")
        growing = sorted((s for s in stats if s.size_diff > 0), key=lambda s: -s.size_diff)
        return tuple(
            AllocationSite(
                f"{f.filename}:{f.lineno}",
                s.size_diff,
                s.count_diff,
                s.size,
                linecache.getline(f.filename, f.lineno).strip(),
            )
            for s in growing[:10]
            for f in (s.traceback[0],)
        )


def _watcher(ask: Callable[[], object], stop: Any, replies: list[tuple[float, str]]) -> None:
    """Ask every WATCH_INTERVAL_S, as `--watch` does (at once again when a reply came late)."""
    while not stop.is_set():
        started = time.perf_counter()
        reply: Any = ask()
        error = "" if getattr(reply, "ok", True) else reply.error
        replies.append((time.perf_counter() - started, error))
        stop.wait(max(0.0, WATCH_INTERVAL_S - (time.perf_counter() - started)))


def watch_costs(seconds: float, rounds: int, heap_objects: int) -> dict[str, dict[str, float]]:
    import threading

    import torch
    from torch import nn

    import rankscope
    from rankscope.config import Config
    from rankscope.runtime.probe import Probe
    from rankscope.runtime.protocol import Command

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.randn(64, 256)
    profiler: Any = None
    step_no = 0

    def train_step() -> None:
        nonlocal step_no
        optimizer.zero_grad()
        model(inputs).square().mean().backward()
        optimizer.step()
        if profiler is not None:
            profiler.take_snapshot(step=step_no)
        step_no += 1

    for _ in range(20):  # torch's lazy imports happen before tracing: the heap is what we make
        train_step()
    profiler = rankscope.MemoryProfiler(track_allocations=True, max_snapshots=1 << 20)
    heap = [list(range(i % 64, i % 64 + 32)) for i in range(heap_objects)]
    for _ in range(50):  # warm up; the profiler's tracemalloc baseline is taken here
        train_step()
    stock = StockMemoryCommand(profiler)
    comparison = {
        "new": per_call_us(lambda: profiler.suspects(max_age_s=0), 1, repeats=3) / 1e3,
        "stock": per_call_us(stock.compare, 1, repeats=3) / 1e3,
    }
    probes = {
        "memory (reuse 10 s)": Probe(Config.from_env(suspects_interval=10.0)),
        "memory (reuse off)": Probe(Config.from_env(suspects_interval=0.0)),
    }
    import tracemalloc

    traced = len(tracemalloc.take_snapshot().traces)
    steps: dict[str, list[float]] = {m: [] for m in WATCH_MODES}
    means: dict[str, list[float]] = {m: [] for m in WATCH_MODES}
    replies: dict[str, list[tuple[float, str]]] = {m: [] for m in WATCH_MODES}
    comparisons = dict.fromkeys(WATCH_MODES, 0)
    for _ in range(rounds):
        for mode in WATCH_MODES:
            probe = probes.get(mode)
            ask: Callable[[], object] | None = stock if mode.startswith("before") else None
            if probe is not None:
                ask = lambda probe=probe: probe.run_command(Command("bench", "memory", {}))  # noqa: E731
            stop = threading.Event()
            watcher = None
            if ask is not None:
                watcher = threading.Thread(target=_watcher, args=(ask, stop, replies[mode]))
                watcher.start()
            taken = profiler.tracemalloc_snapshots
            times = []
            ends = time.perf_counter() + seconds
            while time.perf_counter() < ends:
                started = time.perf_counter()
                train_step()
                times.append(time.perf_counter() - started)
            stop.set()
            if watcher is not None:
                watcher.join()
            while any(p.busy_with for p in probes.values()):  # a late one ends in this mode
                time.sleep(0.05)
            comparisons[mode] += profiler.tracemalloc_snapshots - taken
            steps[mode].extend(times)
            means[mode].append(statistics.fmean(times))
    for probe in probes.values():
        probe.stop()
    profiler.close()
    del heap
    out: dict[str, dict[str, float]] = {"_": {"traced": traced, "heap": heap_objects}}
    out["comparison ms"] = comparison
    for mode in WATCH_MODES:
        ordered = sorted(steps[mode])
        asked = replies[mode]
        out[mode] = {
            "median": statistics.median(ordered) * 1e3,
            "mean": statistics.median(means[mode]) * 1e3,
            "p99": ordered[int(len(ordered) * 0.99)] * 1e3,
            "max": ordered[-1] * 1e3,
            "requests": len(asked),
            "late": sum(1 for _, e in asked if e),
            "reply": statistics.median(t for t, _ in asked) * 1e3 if asked else 0.0,
            "comparisons": comparisons[mode],
        }
    return out


def print_watch(costs: dict[str, dict[str, float]], seconds: float, rounds: int) -> None:
    info = costs["_"]
    print(
        f"\ntraining step with `memory --watch` asking every {WATCH_INTERVAL_S:g} s "
        f"({rounds} rounds x {seconds:g} s per mode; {int(info['heap'])} heap lists, "
        f"{int(info['traced'])} traced blocks):"
    )
    one = costs["comparison ms"]
    print(
        f"  one tracemalloc comparison (suspects), quiet: {one['new']:.0f} ms; before this change "
        f"(filter_traces + compare_to): {one['stock']:.0f} ms ({one['stock'] / one['new']:.1f}x)"
    )
    print(
        f"  {'mode':<22} {'median':>8} {'ratio':>6} {'mean':>8} {'ratio':>6} {'p99':>8} "
        f"{'max':>8}  asked (error)  reply   comparisons"
    )
    base = costs[WATCH_MODES[0]]
    for mode in WATCH_MODES:
        c = costs[mode]
        print(
            f"  {mode:<22} {c['median']:6.2f}ms {c['median'] / base['median']:5.3f}x "
            f"{c['mean']:6.2f}ms {c['mean'] / base['mean']:5.3f}x {c['p99']:6.1f}ms "
            f"{c['max']:6.0f}ms  {int(c['requests']):5d} ({int(c['late']):3d})  "
            f"{c['reply']:6.0f}ms {int(c['comparisons']):5d}"
        )
    print(
        "  median: of every step; mean: median over rounds of each round's mean step (the "
        "throughput); error: 'took longer' or 'still busy'; reply: median time the asking "
        "thread waited"
    )
    print(f"  load average at the end (1, 5, 15 min): {os.getloadavg()}")


def leak_test_costs(snapshots: int, requests: int) -> dict[str, float]:
    """CPU time of the probe's leak test per `memory` request, asked every 2 s of wall time
    compressed to back-to-back calls: reused (10x its cost) against tested on every request.
    Thread CPU time, not wall time: it holds on a loaded machine."""
    import rankscope
    import rankscope.memory.worker_profiler as profiler_module

    out = {}
    with rankscope.MemoryProfiler(max_snapshots=snapshots) as profiler:
        for i in range(snapshots):
            profiler.take_snapshot(step=i)
        for mode, factor in (("tested every request", 0.0), ("reused (now)", 10.0)):
            profiler_module.SUSPECTS_COST_FACTOR = factor
            profiler._last_leaks = None
            started = time.thread_time()
            for _ in range(requests):
                profiler.leak_report(suspects=0, suspects_max_age_s=10.0)
            out[mode] = (time.thread_time() - started) / requests * 1e3
    profiler_module.SUSPECTS_COST_FACTOR = 10.0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="steps per mode per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only-watch", action="store_true", help="only section 3")
    parser.add_argument("--watch-seconds", type=float, default=20.0, help="per mode per round")
    parser.add_argument("--watch-rounds", type=int, default=3)
    parser.add_argument("--heap-objects", type=int, default=100_000)
    parser.add_argument("--only-leak-test", action="store_true", help="only the leak test's cost")
    parser.add_argument("--leak-snapshots", type=int, default=4096)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    print(f"load average (1, 5, 15 min): {os.getloadavg()}")
    if args.only_leak_test:
        leak = leak_test_costs(args.leak_snapshots, 30)
        print(f"leak test per `memory` request, {args.leak_snapshots} snapshots (CPU ms):")
        for mode, ms in leak.items():
            print(f"  {mode:<22} {ms:8.2f} ms")
        return
    if args.only_watch:
        watch = watch_costs(args.watch_seconds, args.watch_rounds, args.heap_objects)
        print_watch(watch, args.watch_seconds, args.watch_rounds)
        return

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
    watch = watch_costs(args.watch_seconds, args.watch_rounds, args.heap_objects)
    print_watch(watch, args.watch_seconds, args.watch_rounds)


if __name__ == "__main__":
    main()
