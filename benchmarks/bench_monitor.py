"""The monitor's costs, side by side with what they are measured against, in one run.

1. `rankscope.step(loss=..., tokens=..., grad_norm=...)` per call (goal < 2 us) against the
   bare `rankscope.step()` and against the demo's training step (the demo's `train_step`: tiny
   MLP, SGD, gloo all_reduce in a one-rank group; goal: < 0.5% of it). CPU time, not wall time.
2. `watch_nan(model, optimizer)` overhead on a training loop (forward, backward, optimizer step)
   against `torch.autograd.detect_anomaly(check_nan=True)` on the same loop: the demo's MLP and
   a wider 8-layer MLP (goal: watch_nan's overhead at least 10x smaller), in process CPU time,
   interleaved.

3. comm-bench's collective sweep (`BenchRank.collectives`, the code the actors run) against
   torch's own loop of `dist.all_reduce` timed by hand, 2 gloo ranks on this host, the same
   sizes (goal: bus bandwidths within 10%). The Ray placement around it is not timed here.

Run: `python benchmarks/bench_monitor.py [--repeats 7]`. CPU only; no Ray cluster.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import time
from collections.abc import Callable, Iterator


def per_call_us(fn: Callable[[], object], calls: int, repeats: int) -> float:
    """CPU time of this thread per call (a shared machine's preemption left out)."""
    runs = []
    for _ in range(repeats):
        start = time.thread_time()
        for _ in range(calls):
            fn()
        runs.append((time.thread_time() - start) / calls * 1e6)
    return statistics.median(runs)


def loop_ms(
    step: Callable[[], object],
    steps: int,
    repeats: int,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    runs = []
    for _ in range(repeats):
        start = clock()
        for _ in range(steps):
            step()
        runs.append((clock() - start) / steps * 1e3)
    return statistics.median(runs)


@contextlib.contextmanager
def one_rank_gloo() -> Iterator[None]:
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def bench_step(repeats: int) -> None:
    import torch
    from torch import nn

    import rankscope
    from rankscope.demo.train import train_step
    from rankscope.monitor.worker import step_recorder

    calls = 200_000
    bare = per_call_us(rankscope.step, calls, repeats)
    full = per_call_us(lambda: rankscope.step(loss=2.5, tokens=512, grad_norm=1.25), calls, repeats)
    empty = per_call_us(lambda: None, calls, repeats)
    from rankscope import level

    level.set_level("off")
    try:
        off = per_call_us(
            lambda: rankscope.step(loss=2.5, tokens=512, grad_norm=1.25), calls, repeats
        )
    finally:
        level.set_level("light")
    step_recorder().clear()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    inputs = torch.randn(16, 32)
    targets = inputs.sum(dim=1, keepdim=True) * 0.1
    with one_rank_gloo():
        demo_ms = loop_ms(
            lambda: train_step(model, opt, inputs, targets), 500, repeats, time.process_time
        )
    print(f"rankscope.step(loss, tokens, grad_norm): {full:.2f} us/call (goal < 2 us)")
    print(f"rankscope.step() with no numbers:        {bare:.2f} us/call")
    print(f"the same with numbers at level off:      {off:.2f} us/call (nothing recorded)")
    print(f"an empty Python call (lambda: None):     {empty:.2f} us/call")
    print(f"the demo's train_step:                   {demo_ms * 1e3:.0f} us")
    print(f"step() with numbers / demo step:         {full / (demo_ms * 1e3):.3%} (goal < 0.5%)")


def bench_watch_nan(repeats: int) -> None:
    import torch
    from torch import nn

    torch.set_num_threads(1)
    models = {
        "demo MLP 32-64-1, batch 16": (
            lambda: nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)),
            (16, 32),
        ),
        "MLP 8 x (512 -> 512, GELU, LayerNorm), batch 64": (
            lambda: nn.Sequential(
                *[m for _ in range(8) for m in (nn.Linear(512, 512), nn.GELU(), nn.LayerNorm(512))],
                nn.Linear(512, 1),
            ),
            (64, 512),
        ),
    }
    for label, (make, shape) in models.items():
        torch.manual_seed(0)
        _watch_case(label, make(), torch.randn(*shape), repeats)


def _watch_case(label: str, model: object, x: object, repeats: int) -> None:
    import warnings

    import torch
    from torch import nn

    from rankscope.monitor import watch_nan

    warnings.filterwarnings("ignore", message=".*[Aa]nomaly.*")
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)  # type: ignore[attr-defined]
    y = x.sum(dim=1, keepdim=True) * 0.01  # type: ignore[attr-defined]

    def step() -> None:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()  # type: ignore[operator]
        opt.step()

    def anomaly_step() -> None:
        with torch.autograd.detect_anomaly(check_nan=True):
            step()

    steps = 100 if x.shape[1] < 100 else 10  # type: ignore[attr-defined]
    loop_ms(step, steps, 1)  # warm up
    loop_ms(anomaly_step, steps, 1)
    # Interleaved in short rounds, in this process's CPU time (torch runs one thread here), and
    # each overhead taken against the plain loop of its own round: the shared machine's load
    # moves the three alike; the medians over many rounds drop the rounds it hit.
    cpu = time.process_time
    base_runs, watch_over, anomaly_over = [], [], []
    for _ in range(repeats * 5):
        base = loop_ms(step, steps, 1, cpu)
        anomaly_over.append(loop_ms(anomaly_step, steps, 1, cpu) - base)
        watch = watch_nan(model, opt)
        try:
            watch_over.append(loop_ms(step, steps, 1, cpu) - base)
        finally:
            watch.remove()
        base_runs.append(base)
    base = statistics.median(base_runs)
    w_over, a_over = statistics.median(watch_over), statistics.median(anomaly_over)
    print(f"{label}:")
    print(f"  plain step {base:.3f} ms; watch_nan +{w_over * 1e3:.0f} us (+{w_over / base:.0%})")
    print(f"  detect_anomaly(check_nan=True) +{a_over * 1e3:.0f} us (+{a_over / base:.0%})")
    ratio = a_over / w_over if w_over > 0 else float("inf")
    print(f"  detect_anomaly's overhead / watch_nan's: {ratio:.1f}x (goal >= 10x)")


COMM_SIZES = [1 << 10, 1 << 14, 1 << 18, 1 << 20, 1 << 22]


def _comm_rank(rank: int, port: int, trials: int, queue: object) -> None:
    """One rank: each trial times every size three ways, comm-bench's sweep (one size a call:
    its broadcast, warm-up call, barrier and timed loop), a hand-timed loop, and the same hand
    loop again (the control: hand vs hand is what this machine's noise alone gives), in turns
    (which goes first rotates), so the machine's load falls on all alike."""
    import torch
    import torch.distributed as dist

    from rankscope.monitor.collect_commbench import BenchRank, _iterations

    torch.set_num_threads(1)
    bench = BenchRank(rank, 2, "gloo")
    bench.join("127.0.0.1", port)

    def ours(size: int) -> float:
        got = bench.collectives([size], budget_s=60.0)
        return next(t for op, _, t in got if op == "all_reduce")

    def by_hand(size: int) -> float:
        x = torch.ones(size // 4)
        iters = _iterations(size)
        dist.all_reduce(x)  # warm-up, as comm-bench does
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        return (time.perf_counter() - start) / iters

    for size in COMM_SIZES:  # the first connections and buffers, untimed
        ours(size)
    times: list[tuple[int, int, str, float]] = []
    for trial in range(trials):
        for i, size in enumerate(COMM_SIZES):
            order = [("ours", ours), ("hand", by_hand), ("again", by_hand)]
            k = (trial + i) % 3
            for name, fn in order[k:] + order[:k]:
                times.append((trial, size, name, fn(size)))
    bench.leave()
    queue.put((rank, times))  # type: ignore[attr-defined]


def bench_comm(repeats: int) -> None:
    import multiprocessing

    from rankscope.monitor.comm import bus_bandwidth

    ctx = multiprocessing.get_context("spawn")
    trials = max(5, repeats)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    queue = ctx.Queue()
    procs = [ctx.Process(target=_comm_rank, args=(r, port, trials, queue)) for r in range(2)]
    for p in procs:
        p.start()
    got = [queue.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    slowest: dict[tuple[int, int, str], float] = {}  # the slower rank, as comm-bench reports
    for _, times in got:
        for trial, size, name, t in times:
            slowest[trial, size, name] = max(t, slowest.get((trial, size, name), 0.0))
    print(
        f"gloo all_reduce, 2 ranks on this host, {trials} interleaved trials: busbw GB/s "
        "(median), comm-bench vs a hand-timed dist.all_reduce loop; control: the hand loop vs "
        "itself (this machine's noise)"
    )
    for size in COMM_SIZES:
        ours = statistics.median(slowest[t, size, "ours"] for t in range(trials))
        hand = statistics.median(slowest[t, size, "hand"] for t in range(trials))
        again = statistics.median(slowest[t, size, "again"] for t in range(trials))
        pooled = statistics.median(
            slowest[t, size, name] for t in range(trials) for name in ("hand", "again")
        )
        bw_ours = bus_bandwidth("all_reduce", size, ours, 2)[1]
        bw_hand = bus_bandwidth("all_reduce", size, pooled, 2)[1]
        print(
            f"  {size:>9,} B: comm-bench {bw_ours:.4f}, by hand {bw_hand:.4f} (both hand loops): "
            f"ratio {bw_ours / bw_hand:.2f}; control (hand loop vs itself) {hand / again:.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--only", choices=["step", "watch_nan", "comm"], default=None)
    args = parser.parse_args()
    benches = {"step": bench_step, "watch_nan": bench_watch_nan, "comm": bench_comm}
    for name, bench in benches.items():
        if args.only in (None, name):
            bench(args.repeats)


if __name__ == "__main__":
    main()
