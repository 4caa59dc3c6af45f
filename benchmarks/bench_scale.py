"""Hub capacity at 64 to 4,096 ranks (issue 20), with the probe simulator against the real hub.

For each size N, on one local Ray cluster and a fresh hub: start ceil(N / --per-sim) simulator
processes (benchmarks/probe_sim.py: N simulated probes speaking the real protocol, heartbeat
1 s), wait until every probe is registered, then measure over a steady window
  - the hub's CPU time per heartbeat (psutil on the hub actor's process: user + system), which
    holds on a loaded machine, and the heartbeats per second it actually got;
  - the hub's memory per probe (USS with N probes minus USS of the fresh hub, over N);
  - heartbeat lateness p50/p99: how long past its long-poll wait a poll returned;
and then the end-to-end `status`, `stacks` and `hang` (in process, through the CLI's typer app
with its real rendering; Ray already joined, so without `ray.init`'s ~1-2 s), p50/p99 over
--repeat runs, with the hub's CPU time during each command (heartbeats meanwhile included);
then the simulated ranks stop stepping (a hung job) and `stacks` is timed again, finding the
odd ranks: first with the ranks not saying since when they wait (as at the level `off`: it
takes its confirming look a second after its first), then with their recorders saying so
(past `LONG_WAIT_S` one look will do).

On a small machine the simulators compete with the hub for the same cores: wall-clock figures
are contention-bound there; the CPU-time figures are what the capacity model is built on.

Run: .venv/bin/python benchmarks/bench_scale.py             (64, 512, 1,024, 4,096: `make bench`;
     about 6 minutes on 2 cores)
     .venv/bin/python benchmarks/bench_scale.py --quick     (64 and 512)
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import pickle
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_TMPDIR", tempfile.mkdtemp(prefix="rs-bench-", dir="/tmp"))

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import probe_sim  # noqa: E402
from rankscope.stacks.analysis import LONG_WAIT_S  # noqa: E402

REGISTER_TIMEOUT_S = 300.0
HUNG = "stacks, hung"
"""`stacks` on the hung job, the ranks' recorders saying since when they wait: one look."""
NO_RECORDER = "stacks, hung, no recorder"
"""... their waits unknown (the level `off`): the confirming look a second after the first."""


@dataclass
class SizeResult:
    probes: int
    beats_per_s: float = 0.0
    hub_cpu_us_per_beat: float = 0.0
    hub_cpu_share: float = 0.0
    """Hub CPU seconds per wall second during the heartbeat window (1.0 = one core)."""
    mem_kib_per_probe: float = 0.0
    late_p50_ms: float = 0.0
    late_p99_ms: float = 0.0
    commands: dict[str, dict[str, float]] = field(default_factory=dict)
    heartbeat_bytes: int = 0
    errors: int = 0
    ring: int = 0
    """Collective records per `collectives` reply (what `hang` moves per rank)."""
    interval_s: float = 0.0
    """The heartbeat interval the hub asked of the probes (`runtime.capacity`)."""


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _hub_process() -> Any:
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if cmdline and cmdline[0].startswith("ray::Hub"):
            return proc
    raise RuntimeError("no ray::Hub process on this machine")


def _cpu(proc: Any) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


def _fresh_hub(ray: Any) -> Any:
    from rankscope.config import Config
    from rankscope.runtime.hub import find_hub, get_or_create_hub

    old = find_hub()
    if old is not None:
        ray.kill(old, no_restart=True)
        for _ in range(100):
            if find_hub() is None:
                break
            time.sleep(0.1)
    hub = get_or_create_hub(Config.from_env())
    ray.get(hub.ping.remote(), timeout=60)
    return hub


def _start_sims(
    address: str, job: str, n: int, per_sim: int, out_dir: str, ring: int, relays: bool = True
) -> list[Any]:
    sims = []
    for i, start in enumerate(range(0, n, per_sim)):
        count = min(per_sim, n - start)
        cmd = [
            sys.executable, os.path.join(HERE, "probe_sim.py"), "--address", address,
            "--job", job, "--probes", str(count), "--start-rank", str(start), "--world", str(n),
            "--duration", "3600", "--ring", str(ring),
            "--out", os.path.join(out_dir, f"sim{i}.json"), *([] if relays else ["--no-relays"]),
        ]  # fmt: skip
        sims.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
    return sims


def _wait_registered(sims: list[Any]) -> float:
    """Until each simulator prints "registered N" (every probe of it is in). Ray's own warnings
    may come first on its stdout ("(raylet) WARNING: 8 PYTHON worker processes have been
    started..."): skipped; a simulator that exits fails with its last lines."""
    start = time.monotonic()
    for sim in sims:
        said: list[str] = []
        while not (line := sim.stdout.readline()).startswith("registered"):
            if not line:
                raise RuntimeError(f"simulator failed: {''.join(said[-5:])!r}")
            said.append(line)
    return time.monotonic() - start


def _wait_relayed(job: str, n: int, timeout_s: float = 120.0) -> float:
    """Wait until every probe of `job` polls through a relay, when the hub asks for relays
    (past 256 live probes): a probe learns it from its first direct poll's reply, which at
    4,096 ranks may wait out a long interval, and a command in between measures the start-up,
    not the steady state."""
    from rankscope.runtime.client import HubClient

    start = time.monotonic()
    if n <= 256 or os.environ.get("RANKSCOPE_RELAY_ABOVE") == "-1":
        return 0.0
    client = HubClient.attach()
    while time.monotonic() - start < timeout_s:
        probes = client.jobs(job, summaries=[]).get(job, [])
        if len(probes) >= n and all(p.relay for p in probes):
            break
        time.sleep(1.0)
    return time.monotonic() - start


def _run_cli(args: list[str]) -> tuple[float, int, str]:
    from typer.testing import CliRunner

    from rankscope.cli.main import app

    start = time.perf_counter()
    result = CliRunner().invoke(app, args)
    return time.perf_counter() - start, result.exit_code, result.output


def _time_command(
    name: str, cli: list[str], repeat: int, hub_proc: Any, expect: int | None = None
) -> dict[str, float]:
    """`cli` run `repeat` times: wall p50/p99, the hub's CPU meanwhile, lines printed; says
    so when it exits other than 0 or 1 (or than `expect`)."""
    times, cpus, lines = [], [], 0
    for _ in range(repeat):
        ca = _cpu(hub_proc)
        took, code, output = _run_cli(cli)
        cb = _cpu(hub_proc)
        if code not in ((0, 1) if expect is None else (expect,)):
            print(f"  {name} exit {code}: {output.strip()[-300:]}", flush=True)
        times.append(took)
        cpus.append(cb - ca)
        lines = output.count("\n")
    figures = {
        "p50_s": statistics.median(times),
        "p99_s": _percentile(times, 0.99),
        "hub_cpu_ms": 1000 * statistics.median(cpus),
        "lines": lines,
    }
    print(
        f"  {name:<12}: p50 {figures['p50_s']:6.2f}s  p99 {figures['p99_s']:6.2f}s  hub CPU "
        f"{figures['hub_cpu_ms']:7.1f} ms  output {lines} lines",
        flush=True,
    )
    return figures


def measure(ray: Any, address: str, n: int, args: argparse.Namespace) -> SizeResult:
    res = SizeResult(n, heartbeat_bytes=probe_sim.heartbeat_bytes(n))
    _fresh_hub(ray)
    hub_proc = _hub_process()
    time.sleep(1.0)
    base_uss = hub_proc.memory_full_info().uss
    job = f"sim-{n}"
    out_dir = tempfile.mkdtemp(prefix=f"rs-sim{n}-")
    res.ring = probe_sim.RING_RECORDS if n <= args.full_ring_upto else args.short_ring
    sims = _start_sims(address, job, n, args.per_sim, out_dir, res.ring, args.relays)
    try:
        took = _wait_registered(sims)
        print(f"  {n} probes registered in {took:.1f}s", flush=True)
        print(f"  every probe through its relay {_wait_relayed(job, n):.1f}s later", flush=True)
        time.sleep(args.settle)
        t0, c0 = time.time(), _cpu(hub_proc)
        time.sleep(args.window)
        t1, c1 = time.time(), _cpu(hub_proc)
        uss = hub_proc.memory_full_info().uss
        res.mem_kib_per_probe = (uss - base_uss) / n / 1024
        res.hub_cpu_share = (c1 - c0) / (t1 - t0)
        commands = {
            "status": ["status", "--job", job],
            "stacks": ["stacks", "--job", job],
            "hang": ["hang", "--job", job],
        }
        for name, cli in commands.items():
            res.commands[name] = _time_command(name, cli, args.repeat, hub_proc)
        for sim in sims:  # the ranks stop stepping where they are, not saying since when they
            sim.send_signal(signal.SIGUSR2)  # wait (the level off): `stacks` looks twice
        stalled = time.monotonic()
        time.sleep(2 * probe_sim.STEP_S + 1.0)
        res.commands[NO_RECORDER] = _time_command(
            NO_RECORDER, commands["stacks"], args.repeat, hub_proc, expect=1
        )
        for sim in sims:  # their recorders say since when: past LONG_WAIT_S, one look will do
            sim.send_signal(signal.SIGUSR1)
        time.sleep(max(1.0, stalled + LONG_WAIT_S + 1.0 - time.monotonic()))  # they heard it
        res.commands[HUNG] = _time_command(
            HUNG, commands["stacks"], args.repeat, hub_proc, expect=1
        )
    finally:
        for sim in sims:
            sim.send_signal(signal.SIGTERM)
        for sim in sims:
            try:
                sim.wait(timeout=60)
            except subprocess.TimeoutExpired:
                sim.kill()
    beats, late, asked, relays = 0, [], 0.0, 0
    for i in range(len(sims)):
        try:
            with open(os.path.join(out_dir, f"sim{i}.json"), encoding="utf-8") as f:
                stats = json.load(f)
        except (OSError, ValueError):
            continue
        res.errors += stats["errors"]
        asked = max(asked, stats.get("asked_interval", 0.0))
        relays += stats.get("relays", 0)
        for done, lateness, _commands in stats["beats"]:
            if t0 <= done <= t1:
                beats += 1
                late.append(lateness)
    res.beats_per_s = beats / (t1 - t0)
    res.interval_s = asked or 1.0
    res.hub_cpu_us_per_beat = 1e6 * (c1 - c0) / max(1, beats)
    res.late_p50_ms = 1000 * _percentile(late, 0.5)
    res.late_p99_ms = 1000 * _percentile(late, 0.99)
    print(
        f"  heartbeats: {res.beats_per_s:.0f}/s ({n} probes, the hub asked every "
        f"{res.interval_s:g} s; {relays} node relays), hub "
        f"{res.hub_cpu_us_per_beat:.0f} us CPU each, {res.hub_cpu_share:.2f} cores; "
        f"{res.mem_kib_per_probe:.1f} KiB/probe; "
        f"late p50/p99 {res.late_p50_ms:.0f}/{res.late_p99_ms:.0f} ms; {res.heartbeat_bytes} B",
        flush=True,
    )
    return res


def _bare_actor_us(ray: Any, calls: int = 2000) -> float:
    """The stock alternative: the CPU of a bare async actor per call with the same payload."""

    @ray.remote(num_cpus=0)
    class Bare:
        async def poll(self, request: Any) -> bool:
            return True

        def pid(self) -> int:
            return os.getpid()

    actor = Bare.remote()  # type: ignore[attr-defined]
    ray.get(actor.poll.remote(None))
    import psutil

    pid = ray.get(actor.pid.remote())
    proc = psutil.Process(pid)
    request = pickle.loads(pickle.dumps(_sample_request(4096)))
    c0 = _cpu(proc)
    for _ in range(calls // 200):
        ray.get([actor.poll.remote(request) for _ in range(200)])
    used = _cpu(proc) - c0
    ray.kill(actor)
    return 1e6 * used / calls


def _sample_request(world: int) -> Any:
    from rankscope.runtime.protocol import PollRequest, Progress

    return PollRequest("1-x", Progress(1, time.time()), (), 0, probe_sim.summaries(1, world, 0.0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 and 512 probes only")
    parser.add_argument("--sizes", default="", help="comma-separated probe counts")
    parser.add_argument("--per-sim", type=int, default=1024, help="probes per simulator process")
    parser.add_argument("--window", type=float, default=15.0, help="heartbeat window, s")
    parser.add_argument("--settle", type=float, default=3.0)
    parser.add_argument(
        "--full-ring-upto",
        type=int,
        default=512,
        help="sizes up to this answer `collectives` with the whole 2,000-record ring, as today",
    )
    parser.add_argument(
        "--short-ring",
        type=int,
        default=64,
        help="records per `collectives` reply above --full-ring-upto (hang's proposed window)",
    )
    parser.add_argument("--repeat", type=int, default=5, help="runs of each command")
    parser.add_argument(
        "--no-relays", dest="relays", action="store_false",
        help="simulated probes poll the hub directly (before node relays, issue 20)",
    )  # fmt: skip
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s] or (
        [64, 512] if args.quick else [64, 512, 1024, 4096]
    )

    # the hub (created here) asks for node relays past 256 probes, or never with --no-relays
    os.environ["RANKSCOPE_RELAY_ABOVE"] = "256" if args.relays else "-1"
    import ray

    ray.init(num_cpus=4, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    address = ray.get_runtime_context().gcs_address
    print(
        f"hub capacity, probe simulator, heartbeat 1 s (or what the hub asks), "
        f"{os.cpu_count()} cores on this machine"
    )
    bare = _bare_actor_us(ray)
    print(f"stock: a bare async actor, same heartbeat payload: {bare:.0f} us CPU per call")
    results = []
    for n in sizes:
        print(f"\n{n} probes:", flush=True)
        results.append(measure(ray, address, n, args))
    print(
        "\nprobes  every s  beats/s  hub us/beat  x bare  hub cores  KiB/probe  beat B"
        "  late p50/p99 ms  status p50/p99 s  stacks p50/p99 s  hang p50/p99 s"
        "  stacks hung, no recorder / hung p50/p99 s"
    )
    for r in results:
        cmd = " ".join(
            f"{r.commands[c]['p50_s']:6.2f}/{r.commands[c]['p99_s']:<6.2f}   "
            for c in ("status", "stacks", "hang", NO_RECORDER, HUNG)
            if c in r.commands
        )
        print(
            f"{r.probes:6d}  {r.interval_s:7g}  {r.beats_per_s:7.0f}  "
            f"{r.hub_cpu_us_per_beat:11.0f}  "
            f"{r.hub_cpu_us_per_beat / bare:6.2f}  {r.hub_cpu_share:9.2f}  "
            f"{r.mem_kib_per_probe:9.1f}  {r.heartbeat_bytes:6d}  "
            f"{r.late_p50_ms:6.0f}/{r.late_p99_ms:<6.0f}  {cmd}"
        )
    print("\nhub CPU during each command (ms; the heartbeats meanwhile included):")
    for r in results:
        per = ", ".join(f"{c} {v['hub_cpu_ms']:.0f}" for c, v in r.commands.items())
        print(
            f"  {r.probes:6d} probes: {per}; hang's reply {r.ring} records per rank; "
            f"errors in simulators: {r.errors}"
        )
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
