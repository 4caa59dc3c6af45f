"""Collective recorder overhead (issue 3): gloo all_reduce of one float, 10,000 calls, 2 ranks.

Side by side, in interleaved trials (medians): no recording; rankscope's recorder; and
TORCH_DISTRIBUTED_DEBUG=DETAIL, the stock way to check collectives. Also the recorder's own
cost per call, measured in one process without communication (a steadier figure).

Run: .venv/bin/python benchmarks/bench_hang.py [--trials N] [--calls N]
(or `--wrapper [--against REV]`: the wrapper alone, beside the recorder at a git revision).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from types import ModuleType

MODES = ("plain", "rankscope", "busy2us", "detail")
"""busy2us: a control, a wrapper that only spins for 2 µs, to show what any 2 µs costs here."""
WARMUP_CALLS = 3000
"""More than the ring's 2,000 slots: measure the steady state, not the ring filling once."""


def worker(mode: str, rank: int, rendezvous: str, calls: int) -> None:
    import torch
    import torch.distributed as dist

    if len(os.sched_getaffinity(0)) >= 2:  # one core per rank: less scheduler noise
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[rank]})
    torch.set_num_threads(1)
    if mode == "rankscope":
        from rankscope.hang.worker_recorder import record_collectives

        record_collectives()
    if mode == "busy2us":
        _spin_before(dist, 2e-6)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
    x = torch.ones(1)
    for _ in range(WARMUP_CALLS):
        dist.all_reduce(x)
    dist.barrier()
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        dist.all_reduce(x)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    dist.barrier()
    if rank == 0:
        print(f"{elapsed / calls * 1e6:.3f} {cpu / calls * 1e6:.3f}")
    dist.destroy_process_group()


def _spin_before(dist: object, seconds: float) -> None:
    original = dist.all_reduce  # type: ignore[attr-defined]

    def all_reduce(*args: object, **kwargs: object) -> object:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            pass
        return original(*args, **kwargs)

    dist.all_reduce = all_reduce  # type: ignore[attr-defined]


def one_trial(mode: str, calls: int) -> tuple[float, float]:
    """(wall, CPU) microseconds per call on rank 0."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if mode == "detail":
        env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    with tempfile.TemporaryDirectory() as tmp:
        rendezvous = os.path.join(tmp, "rdv")
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, "--worker", mode, str(rank), rendezvous, str(calls)],
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            for rank in range(2)
        ]
        out = [p.communicate(timeout=300)[0] for p in procs]
    wall, cpu = out[0].split()
    return float(wall), float(cpu)


def wrapper_cost(
    calls: int = 50_000, trials: int = 15, against: str | None = None
) -> dict[str, tuple[float, float]]:
    """µs per call of a do-nothing collective on a real 1-rank gloo group: bare, recorded (the
    group passed, and the default group), and with the level switched live to `off`.

    Interleaved trials, each timed by the thread's CPU clock (on cores shared with other
    jobs, wall time counts the time this thread waited for a core); (median, min) per case.
    `against`: a git revision whose recorder is timed in the same trials (`recorder at REV`).
    """
    import torch
    import torch.distributed as dist

    from rankscope import level
    from rankscope.hang.worker_recorder import _wrap

    def all_reduce(tensor, op=None, group=None, async_op=False):  # type: ignore[no-untyped-def]
        return None

    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/rdv", rank=0, world_size=1)
        group = dist.group.WORLD
        wrapped = _wrap("all_reduce", all_reduce)
        x = torch.ones(1)
        cases = {
            "bare": (all_reduce, "light", {"group": group}),
            "recorded": (wrapped, "light", {"group": group}),
            "recorded, default group": (wrapped, "light", {}),
            "level off": (wrapped, "off", {"group": group}),
        }
        if against:
            old = _recorder_at(against)._wrap("all_reduce", all_reduce)
            cases[f"recorder at {against}"] = (old, "light", {"group": group})
            cases[f"at {against}, default group"] = (old, "light", {})
        runs: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(trials):  # interleaved: the machine's load drifts between them
            for name, (fn, at, kwargs) in cases.items():
                level.set_level(at)
                start = time.thread_time()
                for _ in range(calls):
                    fn(x, **kwargs)
                runs[name].append((time.thread_time() - start) / calls * 1e6)
        level.set_level("light")
        dist.destroy_process_group()
    return {name: (statistics.median(r), min(r)) for name, r in runs.items()}


def _recorder_at(revision: str) -> ModuleType:
    """The collective recorder as it was at `revision` (hang/worker_recorder.py, before the
    rename hang/recorder.py), imported beside today's, with the wrappers of that revision
    (hang/worker_wrappers.py, or hang/wrappers.py) where it had them."""
    from at_revision import load, source_at

    def either(new: str, old: str) -> str:
        try:
            source = source_at(revision, f"src/rankscope/hang/{new}")
        except subprocess.CalledProcessError:
            source = source_at(revision, f"src/rankscope/hang/{old}")
        return _today_names(source)

    recorder = either("worker_recorder.py", "recorder.py")
    try:
        load("wrappers_at_revision", either("worker_wrappers.py", "wrappers.py"))
    except subprocess.CalledProcessError:  # before the generated wrappers: none to swap
        return load("recorder_at_revision", recorder)
    for module in ("worker_wrappers", "wrappers"):
        recorder = recorder.replace(
            f"from rankscope.hang.{module} import wrap", "from wrappers_at_revision import wrap"
        )
    return load("recorder_at_revision", recorder)


def _today_names(source: str) -> str:
    """An old revision's recorder source importing today's modules under their names now."""
    if "rankscope.hang.callsite" not in source:
        return source
    source = source.replace("rankscope.hang.callsite", "rankscope.hang.worker_callsite")
    model_import = r"(from rankscope\.hang\.model import \([^)]*?)\n\s*error_text,"
    if re.search(model_import, source):
        source = re.sub(model_import, r"\1", source)
        source += "\nfrom rankscope.hang.worker_callsite import error_text  # noqa: E402\n"
    return source


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10_000)
    args = parser.parse_args()
    wall: dict[str, list[float]] = {m: [] for m in MODES}
    cpu: dict[str, list[float]] = {m: [] for m in MODES}
    for _ in range(args.trials):
        for mode in MODES:
            w, c = one_trial(mode, args.calls)
            wall[mode].append(w)
            cpu[mode].append(c)
    print(f"gloo all_reduce of one float, 2 ranks, {args.calls} calls, {args.trials} trials")
    print("  (CPU time is what the caller's process spends; wall time on 2 shared cores is")
    print("   dominated by loopback ping-pong and scheduling, so its differences are noise)")
    for label, table in (("CPU", cpu), ("wall", wall)):
        med = {m: statistics.median(v) for m, v in table.items()}
        ours, detail = med["rankscope"] - med["plain"], med["detail"] - med["plain"]
        spin = med["busy2us"] - med["plain"]
        print(
            f"  {label:<4}: plain {med['plain']:7.2f}  rankscope {med['rankscope']:7.2f}  "
            f"2us-spin {med['busy2us']:7.2f}  DETAIL {med['detail']:8.2f} us/call"
        )
        ratio = f"; DETAIL / recorder {detail / ours:.0f}x (goal >= 20x)" if ours > 0 else ""
        print(
            f"        overhead: recorder {ours:+.2f}, a 2 us spin {spin:+.2f}, "
            f"DETAIL {detail:+.2f} us/call{ratio}"
        )
    print_wrapper_cost()


def print_wrapper_cost(against: str | None = None) -> None:
    costs = wrapper_cost(against=against)
    bare_median, bare_min = costs.pop("bare")
    print("recorder wrapper alone (no communication), thread CPU us/call, median (min) of 15:")
    print(f"  bare call {bare_median:.3f} ({bare_min:.3f})")
    for name, (median, low) in costs.items():
        print(f"  {name:<24} +{median - bare_median:.2f} (+{low - bare_min:.2f})  goal <= 1 us")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--wrapper"]:  # [--against REV]: also the recorder at that revision
        print_wrapper_cost(sys.argv[3] if sys.argv[2:3] == ["--against"] else None)
    elif len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
    else:
        main()
