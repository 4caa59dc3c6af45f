"""Logs and debug levels (issue 15), side by side in one run (medians of interleaved trials):

1. One record: `DistributedLogger.info("loss=%.3f step %d", ...)` (JSON line, unbuffered
   append) against stdlib `logging` to a `FileHandler` (the usual format) and against `print(...,
   flush=True)` to a file (what a Ray worker's stdout is); CPU time of the logging thread per
   record. Also the probe thread's later cost per record (template and numbers, `drain`).
2. 8 workers x 100,000 records on a local Ray cluster: every record on disk (none dropped), and
   the time of `rankscope logs --json` over all of them (folded) as a user runs it, against
   reading and JSON-parsing the same files in one process (the floor).
3. Each level's cost on the demo's training step (its MLP, a 1-rank gloo group, one
   `log.info` of the loss, one `log.debug`, one `conditional_breakpoint` per step): no probe
   (`off` at start; the probe stopped), then the probe with the level switched live to off,
   light and full, all interleaved per trial; CPU time per step of the whole process (the
   probe's threads included) and of the training thread alone.

4. `rankscope logs --follow`'s read on one node (`read_node` with offsets): the first read of
   a 200,000-line file against the next read after one more line (each later second's cost;
   the baseline is the former reader, which read the files whole every second).

Run: .venv/bin/python benchmarks/bench_logs.py [--trials 5] [--workers 8] [--records 100000]
     [--skip-cluster] [--follow-only] [--logs-only]
"""

from __future__ import annotations

import argparse
import glob
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

RECORDS = 20_000


def per_record_costs(trials: int, directory: str) -> dict[str, float]:
    """CPU ns per record of each way to log, trials interleaved."""
    from rankscope.logs import DistributedLogger
    from rankscope.logs import worker_summary as log_summary

    os.environ["RANKSCOPE_LOG_DIR"] = os.path.join(directory, "rs")
    std = logging.getLogger("bench.stdlib")
    std.propagate = False
    std.setLevel(logging.INFO)
    handler = logging.FileHandler(os.path.join(directory, "stdlib.log"))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    std.addHandler(handler)
    dl = DistributedLogger("bench.rankscope")
    printed = open(os.path.join(directory, "print.out"), "w")  # noqa: SIM115

    def timed(fn: object) -> float:
        start = time.thread_time_ns()
        for i in range(RECORDS):
            fn("loss=%.3f step %d", 0.5 + i * 1e-6, i)  # type: ignore[operator]
        return (time.thread_time_ns() - start) / RECORDS

    def do_print(fmt: str, loss: float, step: int) -> None:
        print(fmt % (loss, step), file=printed, flush=True)

    results: dict[str, list[float]] = {"stdlib FileHandler": [], "print flush": [], "rankscope": []}
    drain: list[float] = []
    for _ in range(trials):
        results["stdlib FileHandler"].append(timed(std.info))
        results["print flush"].append(timed(do_print))
        results["rankscope"].append(timed(dl.info))
        start = time.thread_time_ns()
        log_summary.drain()
        drain.append((time.thread_time_ns() - start) / RECORDS)
    printed.close()
    out = {k: statistics.median(v) for k, v in results.items()}
    out["probe drain (later, probe thread)"] = statistics.median(drain)
    return out


class Writer:
    """A Ray actor: logs `n` records through DistributedLogger."""

    def __init__(self, rank: int) -> None:
        import rankscope

        rankscope.init(rank=rank, world_size=8, group="bench-logs")
        self.log = rankscope.DistributedLogger("bench")

    def write(self, n: int) -> float:
        start = time.perf_counter()
        for i in range(n):
            self.log.info("loss=%.4f step %d tokens %d", 1.0 / (i + 1), i, i * 512)
        return time.perf_counter() - start

    def log_dir(self) -> str:
        from rankscope.logs.io_paths import log_root

        return log_root()


def cluster_logs(workers: int, records: int, trials: int) -> dict[str, Any]:
    import ray

    ray.init(num_cpus=max(2, workers), include_dashboard=False, logging_level="ERROR")
    try:
        actor = ray.remote(num_cpus=0)(Writer)
        actors = [actor.remote(r) for r in range(workers)]
        start = time.perf_counter()
        ray.get([a.write.remote(records) for a in actors])
        wall = time.perf_counter() - start
        job = ray.get_runtime_context().get_job_id()
        files = glob.glob(os.path.join(ray.get(actors[0].log_dir.remote()), job, "*.jsonl*"))
        on_disk = 0
        for path in files:
            with open(path, "rb") as f:
                on_disk += sum(1 for _ in f)
        address = ray.get_runtime_context().gcs_address
        command = [sys.executable, "-m", "rankscope.cli.main", "logs", "--json"]
        command += ["--address", address, "--job", job]
        cli_times, floor_times, folded = [], [], 0
        for _ in range(trials):
            start = time.perf_counter()
            proc = subprocess.run(command, capture_output=True, text=True, timeout=1200)
            cli_times.append(time.perf_counter() - start)
            if proc.returncode != 0:
                raise RuntimeError(proc.stderr[-2000:])
            data = json.loads(proc.stdout)["data"]
            folded = sum(f["count"] for job_logs in data for f in job_logs["folds"])
            start = time.perf_counter()
            for path in files:
                with open(path, encoding="utf-8") as f:
                    for line in f:
                        json.loads(line)
            floor_times.append(time.perf_counter() - start)
        return {
            "written": workers * records,
            "on_disk": on_disk,
            "in_logs_json": folded,
            "write_wall_s": wall,
            "cli_s": statistics.median(cli_times),
            "cli_all": cli_times,
            "floor_s": statistics.median(floor_times),
        }
    finally:
        ray.shutdown()


def level_costs(trials: int, steps: int = 300) -> dict[str, tuple[float, float]]:
    """(process CPU s, training-thread CPU s) per demo training step at each level; the probe is
    stopped for the "no probe" trials and started again, so every trial is interleaved."""
    import ray
    import torch
    import torch.distributed as dist
    from torch import nn

    import rankscope
    from rankscope import level
    from rankscope.demo.train import train_step

    ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR")
    torch.set_num_threads(1)
    log = rankscope.DistributedLogger("bench.step")
    names = ("no probe", "off", "light", "full")
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/rdv", rank=0, world_size=1)
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        inputs = torch.randn(16, 32)
        targets = inputs.sum(dim=1, keepdim=True) * 0.1

        def run() -> tuple[float, float]:
            start, start_thread = time.process_time(), time.thread_time()
            for i in range(steps):
                loss = train_step(model, optimizer, inputs, targets)
                log.info("loss=%.4f", loss)
                log.debug("step %d grads reduced", i)
                rankscope.conditional_breakpoint(loss != loss, timeout=0)  # NaN
                rankscope.step()
            return (
                (time.process_time() - start) / steps,
                (time.thread_time() - start_thread) / steps,
            )

        level.set_level("light")
        run()  # warm up
        for trial in range(trials):
            rankscope.shutdown()
            time.sleep(0.5)  # let the probe thread end
            level.set_level("light")
            results["no probe"].append(run())
            rankscope.init(rank=0, world_size=1, group="bench-level")
            probe = rankscope.current_probe()
            assert probe is not None and probe.connected.wait(60), "the probe did not connect"
            live = names[1:]
            for name in live[trial % 3 :] + live[: trial % 3]:  # each order in turn
                level.set_level(name)
                results[name].append(run())
        level.set_level("light")
        dist.destroy_process_group()
    rankscope.shutdown()
    ray.shutdown()
    return {
        k: (statistics.median(p for p, _ in v), statistics.median(t for _, t in v))
        for k, v in results.items()
    }


def follow_read(lines: int = 200_000, trials: int = 5) -> tuple[float, float]:
    """Seconds of a whole read of one node's `lines`-line file, and of the next read (one new
    line) from the offsets the first returned; medians of `trials`."""
    from rankscope.logs.analysis import LogFilter
    from rankscope.logs.collect_reader import read_node

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["RANKSCOPE_LOG_DIR"] = tmp
        os.makedirs(os.path.join(tmp, "job"))
        path = os.path.join(tmp, "job", "7.jsonl")

        def record(i: int) -> str:
            doc = {"time": 1.0 + i, "message": f"loss={i / 7:.3f}", "pid": 7, "rank": 0}
            return json.dumps(doc) + "\n"

        with open(path, "w") as f:
            f.writelines(record(i) for i in range(lines))
        whole, then = [], []
        for t in range(trials):
            start = time.perf_counter()
            first = read_node("job", {}, LogFilter(), 10**6, std_files=False, offsets={})
            whole.append(time.perf_counter() - start)
            with open(path, "a") as f:
                f.write(record(lines + t))
            start = time.perf_counter()
            new = read_node("job", {}, LogFilter(), 10**6, std_files=False, offsets=first.offsets)
            then.append(time.perf_counter() - start)
            assert len(new.lines) == 1
        os.environ.pop("RANKSCOPE_LOG_DIR", None)
    return statistics.median(whole), statistics.median(then)


def print_cluster_logs(workers: int, records: int, trials: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["RANKSCOPE_LOG_DIR"] = tmp
        found = cluster_logs(workers, records, trials)
    print(f"2. {workers} workers x {records:,} records:")
    print(
        f"   written {found['written']:,}, on disk {found['on_disk']:,}, in `logs --json` "
        f"{found['in_logs_json']:,} (written in {found['write_wall_s']:.1f} s wall)"
    )
    print(
        f"   `rankscope logs --json`: {found['cli_s']:.1f} s (median of {trials}; trials "
        f"{', '.join(f'{t:.1f}' for t in found['cli_all'])}); reading + json.loads of the "
        f"same files in one process: {found['floor_s']:.1f} s "
        f"({found['cli_s'] / found['floor_s']:.1f}x)"
    )
    os.environ.pop("RANKSCOPE_LOG_DIR", None)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--skip-cluster", action="store_true")
    parser.add_argument("--follow-only", action="store_true")
    parser.add_argument("--logs-only", action="store_true", help="only 2. (logs --json)")
    args = parser.parse_args()

    if args.logs_only:
        return print_cluster_logs(args.workers, args.records, args.trials)
    whole, then = follow_read(trials=args.trials)
    print("4. logs --follow on one node, a 200,000-line file (median of trials):")
    print(f"   first read {whole * 1e3:.0f} ms; each next read (one new line) {then * 1e3:.2f} ms")
    if args.follow_only:
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        costs = per_record_costs(args.trials, tmp)
    std = costs["stdlib FileHandler"]
    print("1. one record, CPU ns of the logging thread (median of trials):")
    for name, ns in costs.items():
        print(f"   {name:34s} {ns:8.0f} ns   {ns / std:5.2f}x stdlib")
    print(f"   goal: rankscope <= 1.5x stdlib FileHandler ({costs['rankscope'] / std:.2f}x)")

    if not args.skip_cluster:
        print_cluster_logs(args.workers, args.records, max(1, args.trials // 2))

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["RANKSCOPE_LOG_DIR"] = tmp
        steps = level_costs(args.trials)
    base, base_thread = steps["no probe"]
    print("3. demo training step, CPU per step (median of interleaved trials):")
    print("   level      process      vs no probe   training thread   vs no probe")
    for name, (s, t) in steps.items():
        print(
            f"   {name:10s} {s * 1e6:8.1f} us   {100 * (s / base - 1):+6.1f}%   "
            f"{t * 1e6:8.1f} us   {100 * (t / base_thread - 1):+6.1f}%"
        )
    light, light_thread = steps["light"]
    print(
        f"   goal: light < 1% (process {100 * (light / base - 1):+.1f}%, "
        f"training thread {100 * (light_thread / base_thread - 1):+.1f}%)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
