"""Runtime benchmarks (issue 2), on one embedded local Ray cluster.

1. Probe overhead: the demo's training steps per second with the probe on vs off
   (same cluster, same 4-rank gloo job shape, trials interleaved; medians).
2. `rankscope stacks` over 8 processes vs `py-spy dump` of the same 8 pids one after another.

Run: .venv/bin/python benchmarks/bench_runtime.py [--trials N] [--steps N]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_TMPDIR", tempfile.mkdtemp(prefix="rs-bench-", dir="/tmp"))


def _gloo_job(ray: Any, level: str, workers: int = 4) -> list[Any]:
    from rankscope.demo.train import DemoWorker

    class ProbedWorker(DemoWorker):
        """The demo's rank with its probe: Ray takes `worker_process_setup_hook` from the job's
        runtime_env only, not an actor's, so `rankscope.init` starts it (none at level off)."""

        def __init__(self, rank: int, world_size: int, *args: Any) -> None:
            import rankscope

            super().__init__(rank, world_size, *args)
            rankscope.init(rank=rank, world_size=world_size)

    cls: Any = ray.remote(num_cpus=0)(ProbedWorker).options(
        runtime_env={"env_vars": {"RANKSCOPE_LEVEL": level, "OMP_NUM_THREADS": "1"}}
    )
    actors = [cls.remote(r, workers, "none", workers - 1, 10**9) for r in range(workers)]
    host, port = ray.get(actors[0].address.remote())
    ray.get([a.join.remote(host, port) for a in actors])
    ray.get([a.train.remote(20) for a in actors])  # warm up
    return actors


def bench_probe_overhead(ray: Any, trials: int, steps: int) -> dict[str, float]:
    jobs = {level: _gloo_job(ray, level) for level in ("off", "light")}
    rates: dict[str, list[float]] = {"off": [], "light": []}
    for _ in range(trials):
        for level, actors in jobs.items():
            start = time.perf_counter()
            ray.get([a.train.remote(steps) for a in actors])
            rates[level].append(steps / (time.perf_counter() - start))
    for actors in jobs.values():
        for a in actors:
            ray.kill(a)
    off, on = statistics.median(rates["off"]), statistics.median(rates["light"])
    print(f"probe overhead: {trials} interleaved trials of {steps} steps, 4 gloo ranks")
    print(f"  probes off : median {off:8.1f} steps/s  (all: {_fmt(rates['off'])})")
    print(f"  probes on  : median {on:8.1f} steps/s  (all: {_fmt(rates['light'])})")
    print(f"  overhead   : {100 * (off - on) / off:+.2f}%  (goal: under 1%)")
    return {"off": off, "on": on}


class Sleeper:
    """A rank idling in user code, like a worker waiting for work."""

    def __init__(self) -> None:
        import rankscope

        rankscope.init()

    def pid(self) -> int:
        return os.getpid()

    def idle(self) -> None:
        while True:
            time.sleep(0.05)


def bench_stacks(ray: Any, trials: int) -> None:
    from rankscope.runtime.ask import Selection
    from rankscope.runtime.client import HubClient
    from rankscope.stacks.collect import stack_reports
    from rankscope.stacks.collect_pyspy import pyspy_executable

    cls: Any = ray.remote(num_cpus=0)(Sleeper)
    actors = [cls.remote() for _ in range(8)]
    pids = ray.get([a.pid.remote() for a in actors])
    for a in actors:
        a.idle.remote()
    job_id = ray.get_runtime_context().get_job_id()
    client = HubClient.attach()
    while len([p for p in client.probes(job_id) if p.context.pid in pids]) < 8:
        time.sleep(0.1)
    time.sleep(1.0)

    ours, spy = [], []
    exe = pyspy_executable()
    assert exe is not None
    for _ in range(trials):
        start = time.perf_counter()
        report = stack_reports(None, Selection(job_id), client=client)[0]
        ours.append(time.perf_counter() - start)
        assert report.process_count >= 8
        start = time.perf_counter()
        for pid in pids:
            subprocess.run([exe, "dump", "--pid", str(pid)], capture_output=True, check=True)
        spy.append(time.perf_counter() - start)
    cli = []
    address = ray.get_runtime_context().gcs_address
    for _ in range(max(3, trials // 3)):
        start = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "rankscope.cli.main",
                "stacks",
                "--address",
                address,
                "--job",
                job_id,
            ],
            capture_output=True,
            check=True,
        )
        cli.append(time.perf_counter() - start)
    for a in actors:
        ray.kill(a)
    o, s, c = statistics.median(ours), statistics.median(spy), statistics.median(cli)
    print(f"\nstacks of 8 processes, {trials} trials")
    print(f"  rankscope stacks (attached, all 8 at once): median {o * 1000:7.1f} ms")
    print(f"  py-spy dump of the 8 pids, one by one     : median {s * 1000:7.1f} ms")
    print(f"  ratio py-spy / rankscope                  : {s / o:7.1f}x  (goal: > 1x, < 1 s)")
    print(
        f"  whole `rankscope stacks` CLI process      : median {c * 1000:7.1f} ms "
        "(Python start, Ray connect, stacks)"
    )
    print(
        f"  ratio py-spy (8 pids) / whole CLI process : {s / c:7.1f}x  (like for like: each a "
        "fresh process; py-spy reaches only this node's pids and needs ptrace rights, the CLI "
        "every node's)"
    )


def _fmt(values: list[float]) -> str:
    return ", ".join(f"{v:.0f}" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    import ray

    ray.init(
        address="local",
        num_cpus=4,
        include_dashboard=False,
        logging_level=logging.ERROR,
        log_to_driver=False,
        runtime_env={"worker_process_setup_hook": "rankscope.setup_worker"},
    )
    try:
        bench_probe_overhead(ray, args.trials, args.steps)
        bench_stacks(ray, args.trials)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
