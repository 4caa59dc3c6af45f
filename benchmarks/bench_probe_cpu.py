"""The probe's own CPU per second of training, at each level, with 4,096 peers on the hub
(issues 15 and 20).

Steps per second with and without the probe swing by more than the 1% the goal is about on a
shared machine; the CPU time of rankscope's own threads does not depend on what else runs. For
each level a 4-rank gloo demo job (the demo's MLP, an all_reduce per parameter) trains for
--seconds; every rank reads each of its Python threads' CPU clock (and the process's) before
and after: the training thread, rankscope's threads (named `rankscope-*`: the probe's
heartbeat and commands, the hang watchdog) and the rest (Ray's core worker, gloo, torch). The
figures, medians over ranks and trials:
  - rankscope's CPU as a share of the training thread's CPU (what the probe adds to the work);
  - rankscope's CPU as a share of the whole process's CPU;
  - rankscope's CPU milliseconds per second of wall time (of one core);
  - steps per second, for the record (noisy here).
`off` starts no probe at all (RANKSCOPE_LEVEL=off), so its rankscope share is 0 by
construction and its steps/s is the stock figure. With --peers N (default 4,096), N simulated
probes (benchmarks/probe_sim.py, the real protocol, heartbeat 1 s) keep the same hub busy for
the whole run, as a 4,096-rank job would.

Run: .venv/bin/python benchmarks/bench_probe_cpu.py [--seconds 20] [--trials 3] [--peers 4096]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_TMPDIR", tempfile.mkdtemp(prefix="rs-bench-", dir="/tmp"))

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_scale import _start_sims, _wait_registered  # noqa: E402
from rankscope.demo.train import DemoWorker  # noqa: E402

LEVELS = ("off", "light", "full")
WORKERS = 4


def _threads_cpu() -> dict[int, tuple[str, float]]:
    """CPU seconds of each Python thread of this process (its pthread CPU clock, ns resolution),
    by native id and named; key 0 is the rest of the process (Ray's core worker, gloo, torch)."""
    found = {}
    for t in threading.enumerate():
        try:
            clock = time.pthread_getcpuclockid(t.ident or 0)
            found[t.native_id or -1] = (t.name, time.clock_gettime(clock))
        except (OSError, OverflowError):
            continue  # the thread ended meanwhile
    found[0] = ("other", time.process_time() - sum(cpu for _, cpu in found.values()))
    return found


class MeasuredWorker(DemoWorker):
    """The demo's rank with its probe (none at level off), measuring its threads' CPU over a
    training window. (Ray takes `worker_process_setup_hook` from the job's runtime_env only, not
    an actor's, so the probe is started here, as `rankscope.init` in user code does.)"""

    def __init__(self, rank: int, world_size: int, *args: Any) -> None:
        import rankscope

        super().__init__(rank, world_size, *args)
        rankscope.init(rank=rank, world_size=world_size)

    def measure(self, seconds: float) -> dict[str, float]:
        me = threading.get_native_id()
        before = _threads_cpu()
        start, steps = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            self.train(20)
            steps += 20
        wall = time.perf_counter() - start
        after = _threads_cpu()
        spent = {"train": 0.0, "rankscope": 0.0, "other": 0.0}
        for tid, (name, cpu) in after.items():
            delta = cpu - before.get(tid, (name, 0.0))[1]
            if tid == me:
                spent["train"] += delta
            else:
                spent["rankscope" if name.startswith("rankscope") else "other"] += delta
        return {"steps_per_s": steps / wall, "wall_s": wall, **spent}


def _job(ray: Any, level: str) -> list[Any]:
    cls: Any = ray.remote(num_cpus=0)(MeasuredWorker).options(
        runtime_env={"env_vars": {"RANKSCOPE_LEVEL": level, "OMP_NUM_THREADS": "1"}}
    )
    actors = [cls.remote(r, WORKERS, "none", WORKERS - 1, 10**9) for r in range(WORKERS)]
    host, port = ray.get(actors[0].address.remote())
    ray.get([a.join.remote(host, port) for a in actors])
    ray.get([a.train.remote(20) for a in actors])  # warm up
    return actors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="training window per trial")
    parser.add_argument("--trials", type=int, default=3, help="interleaved trials per level")
    parser.add_argument("--peers", type=int, default=4096, help="simulated probes on the hub")
    args = parser.parse_args()

    import ray

    ray.init(num_cpus=4, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    address = ray.get_runtime_context().gcs_address
    jobs = {level: _job(ray, level) for level in LEVELS}  # light/full start the hub
    sims: list[Any] = []
    if args.peers:
        sims = _start_sims(
            address, "peers", args.peers, 1024, tempfile.mkdtemp(prefix="rs-peers-"), 64
        )
        took = _wait_registered(sims)
        print(f"{args.peers} simulated peers registered on the hub in {took:.0f} s", flush=True)
    rows: dict[str, list[dict[str, float]]] = {level: [] for level in LEVELS}
    try:
        for _ in range(args.trials):
            for level, actors in jobs.items():
                rows[level] += ray.get([a.measure.remote(args.seconds) for a in actors])
    finally:
        for sim in sims:
            sim.terminate()
        for sim in sims:  # each writes its statistics and leaves before the cluster goes
            sim.wait(60)
    print(
        f"\nprobe CPU, {WORKERS} gloo ranks x {args.trials} trials of {args.seconds:g} s, "
        f"{args.peers} peers on the hub, {os.cpu_count()} cores (medians over ranks and trials)"
    )
    print(
        "level   rankscope/train CPU   rankscope/process CPU   rankscope ms/s   train cores"
        "   other cores   steps/s"
    )
    for level, measured in rows.items():
        share = statistics.median(r["rankscope"] / max(r["train"], 1e-9) for r in measured)
        of_process = statistics.median(
            r["rankscope"] / max(r["train"] + r["other"] + r["rankscope"], 1e-9) for r in measured
        )
        print(
            f"{level:6s}  {100 * share:18.2f}%   {100 * of_process:20.2f}%   "
            f"{1000 * statistics.median(r['rankscope'] / r['wall_s'] for r in measured):14.2f}   "
            f"{statistics.median(r['train'] / r['wall_s'] for r in measured):11.3f}   "
            f"{statistics.median(r['other'] / r['wall_s'] for r in measured):11.3f}   "
            f"{statistics.median(r['steps_per_s'] for r in measured):7.1f}"
        )
    print("goal: light < 1% (issue 15), the probe's step overhead < 1% at 4,096 peers (issue 20)")
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
