"""Where the hub's CPU goes during a command, at N simulated ranks (issue 20).

Starts a local Ray cluster, a fresh hub and N simulated probes (probe_sim.py, relays on past
256 probes, as `bench_scale.py` does), then runs each command in --cmd (--repeat times) through
the CLI's typer app while py-spy samples the hub; prints each command's wall time, the CPU
time of the hub, the CLI and the simulators (and their medians), and writes py-spy's collapsed
stacks (`--format raw`) of the hub to --out (of the CLI to --cli-out, of one simulator's
`SimHost` to --sim-out) for reading with any flamegraph tool.

Run: .venv/bin/python benchmarks/profile_hub.py --n 4096 --cmd stacks,hang --out hub.txt
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_TMPDIR", tempfile.mkdtemp(prefix="rs-prof-", dir="/tmp"))
os.environ.setdefault("RANKSCOPE_RELAY_ABOVE", "256")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psutil

import bench_scale
from rankscope.stacks.collect_pyspy import pyspy_executable


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2048, help="simulated probes")
    parser.add_argument("--cmd", default="stacks,hang", help="comma-separated CLI commands")
    parser.add_argument("--per-sim", type=int, default=1024, help="probes per simulator")
    parser.add_argument("--out", default="hub-profile.txt", help="py-spy's collapsed stacks")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each command")
    parser.add_argument("--cli-out", default="", help="py-spy's collapsed stacks of the CLI too")
    parser.add_argument("--sim-out", default="", help="and of one simulator's SimHost actor")
    args = parser.parse_args()
    import ray

    ray.init(num_cpus=4, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    address = ray.get_runtime_context().gcs_address
    bench_scale._fresh_hub(ray)
    hub = bench_scale._hub_process()
    cli = psutil.Process()  # the CLI runs in this process (typer's CliRunner)
    sims = bench_scale._start_sims(address, "sim", args.n, args.per_sim, tempfile.mkdtemp(), 64)
    try:
        print(f"{args.n} probes registered in {bench_scale._wait_registered(sims):.1f}s")
        print(
            f"every probe through its relay {bench_scale._wait_relayed('sim', args.n):.1f}s later"
        )
        time.sleep(5.0)
        simulators = _simulator_processes(sims)
        targets = {args.out: hub.pid, args.cli_out: cli.pid, args.sim_out: simulators[-1].pid}
        spies = [_spy(pid, out) for out, pid in targets.items() if out]
        time.sleep(1.0)
        for command in args.cmd.split(","):
            times, cpus, cli_cpus, sim_cpus = [], [], [], []
            for _ in range(args.repeat):
                before, cli_before = bench_scale._cpu(hub), bench_scale._cpu(cli)
                sim_before = _total_cpu(simulators)
                took, code, _ = bench_scale._run_cli([command, "--job", "sim"])
                used, cli_used = bench_scale._cpu(hub) - before, bench_scale._cpu(cli) - cli_before
                sim_used = _total_cpu(simulators) - sim_before
                times.append(took)
                cpus.append(used)
                cli_cpus.append(cli_used)
                sim_cpus.append(sim_used)
                print(
                    f"{command}: {took:.2f}s, exit {code}, hub CPU {used:.2f}s, "
                    f"CLI CPU {cli_used:.2f}s, simulators' CPU {sim_used:.2f}s",
                    flush=True,
                )
            if args.repeat > 1:
                print(
                    f"{command} median: {statistics.median(times):.2f}s, hub CPU "
                    f"{statistics.median(cpus):.2f}s, CLI CPU {statistics.median(cli_cpus):.2f}s, "
                    f"simulators' CPU {statistics.median(sim_cpus):.2f}s",
                    flush=True,
                )
        for each in spies:
            each.send_signal(2)
        for each in spies:
            each.wait(30)
        print("py-spy's samples:", ", ".join(out for out in targets if out))
    finally:
        for sim in sims:
            sim.terminate()
        for sim in sims:
            sim.wait(60)
    ray.shutdown()
    return 0


def _spy(pid: int, out: str) -> subprocess.Popen[bytes]:
    """py-spy sampling `pid` (all its threads, idle ones left out) into `out` until SIGINT."""
    command = [pyspy_executable() or "py-spy", "record", "-p", str(pid), "-r", "50", "-f", "raw",
               "-o", out, "--nonblocking", "--threads"]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _simulator_processes(sims: list[subprocess.Popen[str]]) -> list[psutil.Process]:
    """The simulators' drivers and their `SimHost` actors (what 512 nodes' ranks and relays
    do on a cluster, here on the same cores as the hub and the CLI)."""
    hosts = [
        proc
        for proc in psutil.process_iter(["cmdline"])
        if (proc.info.get("cmdline") or [""])[0].startswith("ray::SimHost")
    ]
    return [psutil.Process(sim.pid) for sim in sims] + hosts


def _total_cpu(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            total += bench_scale._cpu(proc)
    return total


if __name__ == "__main__":
    sys.exit(main())
