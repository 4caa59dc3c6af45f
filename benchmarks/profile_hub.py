"""Where the hub's CPU goes during a command, at N simulated ranks (issue 20).

Starts a local Ray cluster, a fresh hub and N simulated probes (probe_sim.py, relays on past
256 probes, as `bench_scale.py` does), then runs each command in --cmd (--repeat times) through
the CLI's typer app while py-spy samples the hub; prints each command's wall time, the hub's CPU
time and the CLI's (and their medians), and writes py-spy's collapsed stacks (`--format raw`) to
--out for reading with any flamegraph tool.

Run: .venv/bin/python benchmarks/profile_hub.py --n 4096 --cmd stacks,hang --out hub.txt
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

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_TMPDIR", tempfile.mkdtemp(prefix="rs-prof-", dir="/tmp"))
os.environ.setdefault("RANKSCOPE_RELAY_ABOVE", "256")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psutil

import bench_scale
from rankscope.stacks.pyspy import pyspy_executable


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2048, help="simulated probes")
    parser.add_argument("--cmd", default="stacks,hang", help="comma-separated CLI commands")
    parser.add_argument("--per-sim", type=int, default=1024, help="probes per simulator")
    parser.add_argument("--out", default="hub-profile.txt", help="py-spy's collapsed stacks")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each command")
    parser.add_argument("--cli-out", default="", help="py-spy's collapsed stacks of the CLI too")
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
        spy = subprocess.Popen(
            [pyspy_executable() or "py-spy", "record", "-p", str(hub.pid), "-r", "50",
             "-f", "raw", "-o", args.out, "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        spies = [spy]
        if args.cli_out:
            spies.append(
                subprocess.Popen(
                    [
                        pyspy_executable() or "py-spy",
                        "record",
                        "-p",
                        str(cli.pid),
                        "-r",
                        "100",
                        "-f",
                        "raw",
                        "-o",
                        args.cli_out,
                        "--nonblocking",
                        "--threads",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        time.sleep(1.0)
        for command in args.cmd.split(","):
            times, cpus, cli_cpus = [], [], []
            for _ in range(args.repeat):
                before, cli_before = bench_scale._cpu(hub), bench_scale._cpu(cli)
                took, code, _ = bench_scale._run_cli([command, "--job", "sim"])
                used, cli_used = bench_scale._cpu(hub) - before, bench_scale._cpu(cli) - cli_before
                times.append(took)
                cpus.append(used)
                cli_cpus.append(cli_used)
                print(
                    f"{command}: {took:.2f}s, exit {code}, hub CPU {used:.2f}s, "
                    f"CLI CPU {cli_used:.2f}s",
                    flush=True,
                )
            if args.repeat > 1:
                print(
                    f"{command} median: {statistics.median(times):.2f}s, hub CPU "
                    f"{statistics.median(cpus):.2f}s, CLI CPU {statistics.median(cli_cpus):.2f}s",
                    flush=True,
                )
        for each in spies:
            each.send_signal(2)
        for each in spies:
            each.wait(30)
        print(
            f"py-spy's samples of the hub: {args.out}"
            + (f", of the CLI: {args.cli_out}" if args.cli_out else "")
        )
    finally:
        for sim in sims:
            sim.terminate()
        for sim in sims:
            sim.wait(60)
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
