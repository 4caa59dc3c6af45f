"""What the level `light` costs a real job, like for like (issue 33).

Two 8-rank jobs on one local Ray cluster, each a real gloo group of Ray actors running the
demo's training step (its MLP, an all_reduce per parameter, one log line per step): "no
probe" logs its line through a stdlib `FileHandler` and starts no probe; "light" starts the
probe (`rankscope.init`), logs through `DistributedLogger` and calls `rankscope.step()`. The
jobs train in turn, interleaved per trial; while one trains, the other's ranks are idle ranks.
Two step sizes: the demo's (about 0.6 ms of compute) and one with 20 ms of matmuls added.

Measured per trial, for every rank:
  - the whole process's CPU, read from /proc by the driver (every thread: Ray's core worker,
    gloo, the probe's), per step of a training rank and per second of an idle rank;
  - the training thread's CPU (`time.thread_time()` in the thread), per step;
  - rankscope's own threads (`rankscope-*`, from /proc), per second.
A difference (light minus no probe) is taken per trial between the medians over ranks, and
reported as the median over trials with its range. Then, in a light rank, the per-call costs
the step makes (a log record against the stdlib's, the recorder's wrapper of each collective,
`rankscope.step()`): what a step should cost and nothing more. With --peers N (default 4,096),
the trials run again while N simulated probes (benchmarks/probe_sim.py) keep the hub busy.

Goals: light at most 1% of the 20 ms step (process and training thread); at most 1 ms of CPU
per second per idle rank; the 0.6 ms step's cost equal to its per-call costs. `--control`
runs the same with no probe in either job: what two identical jobs differ by on this machine.

Run: .venv/bin/python benchmarks/bench_level_cost.py [--trials 15] [--peers 4096]
     [--peer-trials 5] [--control]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_TMPDIR", tempfile.mkdtemp(prefix="rs-bench-", dir="/tmp"))

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from proc_cpu import ProcessCpu, process_cpu, thread_cpu  # noqa: E402
from rankscope.demo.gloo import GlooMember  # noqa: E402

WORLD = 8
JOBS = ("no probe", "light")
STEPS = {"0.6 ms": (0.0, 40), "20 ms": (0.020, 8)}
"""Step size: (compute added to the demo's step, seconds; steps per trial)."""
LINE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
COLLECTIVES_PER_STEP = 4
"""The demo MLP's four parameters, one all_reduce each."""


class BenchRank(GlooMember):
    """One rank of the demo's data-parallel job, with or without the probe."""

    def __init__(self, rank: int, world_size: int, probe: bool, log_dir: str) -> None:
        import torch
        from torch import nn

        self.rank, self.world_size, self.probe = rank, world_size, probe
        torch.manual_seed(0)
        torch.set_num_threads(1)
        self.model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)
        self.inputs = torch.randn(64, 32)
        self.targets = self.inputs.sum(dim=1, keepdim=True) * 0.1
        self.work = torch.randn(128, 128)
        self.stdlib = _stdlib_logger(os.path.join(log_dir, f"stdlib-{probe}-{rank}.log"))
        self.log: Any = self.stdlib
        if probe:
            import rankscope

            rankscope.init(rank=rank, world_size=world_size, group="bench-light")
            self.log = rankscope.DistributedLogger("bench.step")

    def ids(self) -> tuple[int, list[int]]:
        """This process's pid and its rankscope threads' native ids."""
        ours = [t.native_id or 0 for t in threading.enumerate() if t.name.startswith("rankscope")]
        return os.getpid(), ours

    def matmuls_for(self, seconds: float) -> int:
        """How many 128x128 matmuls take `seconds` of this thread's CPU (median of 5)."""
        rates = []
        for _ in range(5):
            start = time.thread_time()
            for _ in range(200):
                self.work @ self.work
            rates.append(200 / (time.thread_time() - start))
        return max(0, round(seconds * statistics.median(rates)))

    def train(self, steps: int, matmuls: int) -> dict[str, float]:
        """Train `steps` steps; CPU of this thread and of the process, wall time."""
        import rankscope
        from rankscope.demo.train import train_step

        wall, process, thread = time.perf_counter(), time.process_time(), time.thread_time()
        for _ in range(steps):
            for _ in range(matmuls):
                self.work @ self.work
            loss = train_step(self.model, self.optimizer, self.inputs, self.targets)
            self.log.info("loss=%.4f", loss)
            if self.probe:
                rankscope.step(loss=loss, tokens=64)
        return {
            "wall": time.perf_counter() - wall,
            "process": time.process_time() - process,
            "thread": time.thread_time() - thread,
        }

    def per_call_costs(self, calls: int = 5000, trials: int = 7) -> dict[str, float]:
        """µs of the training thread per call the step makes, against its stock alternative:
        a log record (DistributedLogger vs stdlib FileHandler), a collective's recorder wrapper
        (a do-nothing all_reduce wrapped vs bare, default group), `rankscope.step()`."""
        import torch

        import rankscope
        from rankscope.hang.worker_recorder import _wrap

        def all_reduce(tensor, op=None, group=None, async_op=False):  # type: ignore[no-untyped-def]
            return None

        wrapped, x = _wrap("all_reduce", all_reduce), torch.ones(1)
        cases: dict[str, Any] = {
            "stdlib record": lambda: self.stdlib.info("loss=%.4f", 0.5),
            "rankscope record": lambda: self.log.info("loss=%.4f", 0.5),
            "bare all_reduce": lambda: all_reduce(x),
            "recorded all_reduce": lambda: wrapped(x),
            "no step()": lambda: None,
            "step()": lambda: rankscope.step(loss=0.5, tokens=64),
        }
        runs: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(trials):
            for name, call in cases.items():
                start = time.thread_time()
                for _ in range(calls):
                    call()
                runs[name].append((time.thread_time() - start) / calls * 1e6)
        med = {name: statistics.median(r) for name, r in runs.items()}
        return {
            "record": med["rankscope record"] - med["stdlib record"],
            "stdlib record": med["stdlib record"],
            "collective": med["recorded all_reduce"] - med["bare all_reduce"],
            "step": med["step()"] - med["no step()"],
        }


def _stdlib_logger(path: str) -> logging.Logger:
    logger = logging.getLogger(f"bench.stdlib.{path}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter(LINE_FORMAT))
    logger.addHandler(handler)
    return logger


@dataclass
class Job:
    name: str
    actors: list[Any]
    pids: list[int] = field(default_factory=list)
    ours: list[list[int]] = field(default_factory=list)
    """Per rank, the native ids of rankscope's threads."""

    def cpu(self) -> list[tuple[ProcessCpu, float]]:
        """Per rank: the process's CPU and its rankscope threads' CPU, seconds."""
        return [
            (process_cpu(pid), sum(thread_cpu(pid, tid) for tid in tids))
            for pid, tids in zip(self.pids, self.ours, strict=True)
        ]


@dataclass
class Trials:
    """Per job, per trial, the medians over ranks (microseconds per step; ms per second)."""

    process_us: dict[str, list[float]] = field(default_factory=dict)
    ticks_us: dict[str, list[float]] = field(default_factory=dict)
    thread_us: dict[str, list[float]] = field(default_factory=dict)
    wall_ms: dict[str, list[float]] = field(default_factory=dict)
    ours_ms_per_s: dict[str, list[float]] = field(default_factory=dict)
    idle_ms_per_s: dict[str, list[float]] = field(default_factory=dict)
    idle_ticks_ms_per_s: dict[str, list[float]] = field(default_factory=dict)
    idle_ours_ms_per_s: dict[str, list[float]] = field(default_factory=dict)

    def add(self, table: dict[str, list[float]], job: str, values: list[float]) -> None:
        table.setdefault(job, []).append(statistics.median(values))


def _make_job(ray: Any, name: str, log_dir: str, probe: bool) -> Job:
    env = {"OMP_NUM_THREADS": "1", "RANKSCOPE_LEVEL": "light" if probe else "off"}
    env["RANKSCOPE_LOG_DIR"] = os.path.join(log_dir, "rankscope")
    cls: Any = ray.remote(num_cpus=0)(BenchRank).options(runtime_env={"env_vars": env})
    actors = [cls.remote(r, WORLD, probe, log_dir) for r in range(WORLD)]
    host, port = ray.get(actors[0].address.remote())
    ray.get([a.join.remote(host, port) for a in actors])
    job = Job(name, actors)
    for pid, ours in ray.get([a.ids.remote() for a in actors]):
        job.pids.append(pid)
        job.ours.append(ours)
    return job


def run_trials(ray: Any, jobs: dict[str, Job], trials: int, matmuls: dict[str, int]) -> Any:
    """Every step size and job in turn, the order alternating by trial; per step size the
    `Trials` of the training ranks and of the idle ones."""
    found = {size: Trials() for size in STEPS}
    for trial in range(trials):
        for size, (_, steps) in STEPS.items():
            order = JOBS if trial % 2 == 0 else JOBS[::-1]
            for name in order:
                t = found[size]
                before = {n: j.cpu() for n, j in jobs.items()}
                start = time.perf_counter()
                inside = ray.get([a.train.remote(steps, matmuls[size]) for a in jobs[name].actors])
                wall = time.perf_counter() - start
                after = {n: j.cpu() for n, j in jobs.items()}
                for n in jobs:
                    spent = [
                        (a[0] - b[0], a[1] - b[1]) for a, b in zip(after[n], before[n], strict=True)
                    ]
                    if n == name:
                        t.add(t.process_us, n, [s.threads_s / steps * 1e6 for s, _ in spent])
                        t.add(t.ticks_us, n, [s.ticks_s / steps * 1e6 for s, _ in spent])
                        t.add(t.thread_us, n, [r["thread"] / steps * 1e6 for r in inside])
                        t.add(t.wall_ms, n, [r["wall"] / steps * 1e3 for r in inside])
                        t.add(t.ours_ms_per_s, n, [o / wall * 1e3 for _, o in spent])
                    else:
                        t.add(t.idle_ms_per_s, n, [s.threads_s / wall * 1e3 for s, _ in spent])
                        t.add(t.idle_ticks_ms_per_s, n, [s.ticks_s / wall * 1e3 for s, _ in spent])
                        t.add(t.idle_ours_ms_per_s, n, [o / wall * 1e3 for _, o in spent])
    return found


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):8.1f} [{min(values):.1f}, {max(values):.1f}]"


def _diff(table: dict[str, list[float]]) -> list[float]:
    """Per trial, light minus no probe."""
    return [b - a for a, b in zip(table["no probe"], table["light"], strict=True)]


def report(label: str, found: dict[str, Trials], costs: dict[str, float]) -> dict[str, Any]:
    """Print one phase's figures, measured and as the per-call costs and the idle probe's CPU
    per second predict them; return them for --json."""
    print(f"\n== {label}: medians over trials [min, max] of the per-trial medians over ranks")
    expected = costs["record"] + COLLECTIVES_PER_STEP * costs["collective"] + costs["step"]
    print(
        f"-- per-call costs in a light rank (us, training thread): record "
        f"{costs['record']:+.2f} (stdlib's {costs['stdlib record']:.2f}), collective "
        f"{costs['collective']:+.2f}, step() {costs['step']:+.2f}; a step makes 1 record, "
        f"{COLLECTIVES_PER_STEP} collectives, 1 step(): {expected:+.1f} us"
    )
    out: dict[str, Any] = {"per_call_us": {**costs, "expected_per_step": expected}}
    for size, t in found.items():
        print(f"-- step {size}")
        for name in JOBS:
            print(
                f"  {name:8s} process {_spread(t.process_us[name])} us/step "
                f"(ticks {statistics.median(t.ticks_us[name]):.0f})  thread "
                f"{_spread(t.thread_us[name])} us/step  wall {_spread(t.wall_ms[name])} ms/step"
            )
        d_proc, d_thread, idle = _diff(t.process_us), _diff(t.thread_us), _diff(t.idle_ms_per_s)
        base_p = statistics.median(t.process_us["no probe"])
        base_t = statistics.median(t.thread_us["no probe"])
        wall_light, idle_ms = statistics.median(t.wall_ms["light"]), statistics.median(idle)
        print(
            f"  light - no probe: process {_spread(d_proc)} us/step "
            f"({100 * statistics.median(d_proc) / base_p:+.2f}%), thread {_spread(d_thread)} "
            f"us/step ({100 * statistics.median(d_thread) / base_t:+.2f}%)"
        )
        print(
            f"  predicted: thread {expected:+.1f} us/step ({100 * expected / base_t:+.2f}%); "
            f"process {expected + idle_ms * wall_light:+.0f} us/step (the calls, and the idle "
            f"probe's {idle_ms:.2f} ms/s x {wall_light:.0f} ms of wall per step); on a core of "
            f"its own (wall = CPU) {100 * expected / base_p + idle_ms / 10:+.2f}%  (20 ms: <= 1%)"
        )
        print(
            f"  training rank, the probe's CPU per second: "
            f"{statistics.median(d_proc) / wall_light:.2f} ms/s (process), rankscope threads "
            f"{_spread(t.ours_ms_per_s['light'])} ms/s"
        )
        print(
            f"  idle rank, CPU per second: no probe {_spread(t.idle_ms_per_s['no probe'])}, "
            f"light {_spread(t.idle_ms_per_s['light'])}; the probe's {_spread(idle)} ms/s "
            f"(ticks: {statistics.median(_diff(t.idle_ticks_ms_per_s)):.2f}); rankscope threads "
            f"{_spread(t.idle_ours_ms_per_s['light'])} ms/s   goal <= 1 ms/s"
        )
        out[size] = asdict(t)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=15, help="interleaved trials (>= 15)")
    parser.add_argument("--peers", type=int, default=4096, help="simulated probes; 0: none")
    parser.add_argument("--peer-trials", type=int, default=5, help="trials with the peers on")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument(
        "--control",
        action="store_true",
        help="an A/A run: the job labelled light starts no probe either (the jobs' own bias)",
    )
    args = parser.parse_args()

    import ray

    from bench_scale import _start_sims, _wait_registered

    log_dir = tempfile.mkdtemp(prefix="rs-level-cost-")
    ray.init(num_cpus=4, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    jobs = {
        name: _make_job(ray, name, log_dir, name == "light" and not args.control) for name in JOBS
    }
    if args.control:
        print("CONTROL (A/A): neither job starts a probe; 'light' is a second 'no probe' job")
    probe_rank = jobs["no probe"].actors[0]
    matmuls = {size: ray.get(probe_rank.matmuls_for.remote(s)) for size, (s, _) in STEPS.items()}
    for job in jobs.values():  # warm up
        ray.get([a.train.remote(20, 0) for a in job.actors])
    print(f"{WORLD} ranks per job, {os.cpu_count()} cores; matmuls per step {matmuls}", flush=True)
    figures = {"quiet hub": run_trials(ray, jobs, args.trials, matmuls)}
    costs = ray.get(jobs["light"].actors[0].per_call_costs.remote())
    results = {
        "quiet hub": report(f"{WORLD}-rank jobs, {args.trials} trials", figures["quiet hub"], costs)
    }
    if args.peers:
        address = ray.get_runtime_context().gcs_address
        out_dir = tempfile.mkdtemp(prefix="rs-peers-")
        sims = _start_sims(address, "peers", args.peers, 1024, out_dir, 64)
        try:
            print(f"\n{args.peers} simulated peers registered in {_wait_registered(sims):.0f} s")
            time.sleep(5)  # the probes learn the longer heartbeat interval the hub asks for
            found = run_trials(ray, jobs, args.peer_trials, matmuls)
        finally:
            for sim in sims:
                sim.terminate()
            for sim in sims:
                sim.wait(60)
        results["peers"] = report(
            f"with {args.peers} peers, {args.peer_trials} trials", found, costs
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
