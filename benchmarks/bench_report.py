"""`rankscope report` over a synthetic 4,096-rank run directory: time and page size.

The run directory is what the hub leaves after such a job: one `probe.registered` record per
rank, the watchdog's hang report event, 200 consistency checks (each sent once, by the lowest
rank), a memory profile of every rank (20 snapshots each, as `diagnose --mode
memory_profile` writes it), and every rank's whole-run step series (`steps-*.json`, 128 points).
Measured: the whole CLI process (`rankscope report DIR -o page.html`, import and Python start
included) against `rankscope events --help` started the same way (the floor of any CLI call),
and the report's own build + render in process. Goal: under 3 s, page under 5 MB.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from rankscope.monitor.io_history import MAX_POINTS, file_name
from rankscope.report.analysis import build_report
from rankscope.report.collect import collect_run
from rankscope.report.render import render_html
from rankscope.runtime.protocol import Event
from rankscope.runtime.run_dir import append_events, write_atomically

JOB = "04000000"


def synthetic_run(run_dir: str, ranks: int, snapshots: int, step_files: bool = True) -> str:
    t0 = 1_796_300_000.0
    batch = []
    for r in range(ranks):
        context = {"rank": r, "pid": 10_000 + r, "hostname": f"node{r // 8}",
                   "node_ip": f"10.0.{r // 2048}.{(r // 8) % 256}", "group": "10.0.0.1:29500",
                   "actor_class": "ActorRolloutRefWorker"}  # fmt: skip
        batch.append((JOB, f"p{r}", Event("probe.registered", t0 + r * 1e-3, {"context": context})))
    for step in range(200):  # a check every few steps, sent once by the lowest rank
        payload = {"operation_name": "gradient_sync", "ok": step != 150,
                   "ranks": list(range(ranks)), "differing_total": int(step == 150),
                   "summary": "rank 77 is the outlier" if step == 150 else "all equal"}  # fmt: skip
        batch.append((JOB, "p0", Event("consistency", t0 + 100 + step, payload)))
    finding = "group 0 (4096 ranks): ranks 0-3000,3002-4095 wait in all_reduce #9 ...; rank 3001"
    batch.append((JOB, "p0", Event("hang_report", t0 + 300, {"findings": [finding]})))
    append_events(run_dir, batch)
    history = [
        {
            "time": t0 + i * 10,
            "pid": 0,
            "rss": 2**31 + i * 2**22,
            "anon": 2**31,
            "node_total": 2**40,
            "node_available": 2**39,
        }
        for i in range(snapshots)
    ]
    replies = [
        {"snapshot": {**history[-1], "pid": 10_000 + r}, "history": history, "leaks": []}
        for r in range(ranks)
    ]
    labels = [{"pid": 10_000 + r, "label": f"rank {r}"} for r in range(ranks)]
    profile = {"data": {"memory": {"ranks": labels}, "replies": replies}}
    write_atomically(run_dir, JOB, "memory-profile-1.json", json.dumps(profile))
    for r in range(ranks if step_files else 0):  # each rank's whole run, as monitor.io_history
        # writes it
        rows = [[s * 8, round(t0 + s * 0.8 + r * 1e-4, 3), round(2 / (1 + s / 50), 6),
                 32768.0, 1.25] for s in range(1, MAX_POINTS + 1)]  # fmt: skip
        doc = {"kind": "rankscope.steps", "version": 1, "rank": r, "group": "10.0.0.1:29500",
               "node": f"node{r // 8}", "pid": 10_000 + r, "stride": 8,
               "steps_seen": 8 * MAX_POINTS, "first_nonfinite": None,
               "columns": ["step", "t", "loss", "tokens", "grad_norm"], "rows": rows}  # fmt: skip
        name = file_name(r, "10.0.0.1:29500", 0)
        write_atomically(run_dir, JOB, name, json.dumps(doc, separators=(",", ":")))
    return os.path.join(run_dir, JOB)


def synthetic_trace(path: str, ranks: int, steps: int) -> None:
    """What `rankscope trace` writes for `ranks` ranks: a `forward` span, an all_reduce (the
    last rank 50 ms late) and a step marker per step."""
    from rankscope.context import RankContext
    from rankscope.hang.model import CallState, CollectiveRecord
    from rankscope.runtime.protocol import ProbeInfo, ProbeState, ProbeStatus, Progress
    from rankscope.trace.analysis import split_collectives
    from rankscope.trace.chrome import render_trace
    from rankscope.trace.model import RankTrace

    t0, traces = 1_796_300_000.0, []
    for rank in range(ranks):
        ctx = RankContext(rank=rank, local_rank=rank % 8, world_size=ranks, node_id=f"n{rank // 8}",
                          node_ip=f"10.0.0.{rank // 8}", hostname="h", pid=rank + 1,
                          job_id=JOB, actor_id=None, actor_class="Worker", task_id=None,
                          rank_source="env", group="g")  # fmt: skip
        status = ProbeStatus(ProbeInfo(f"p{rank}", ctx, "0", 0.0), ProbeState.ALIVE, t0, t0,
                             Progress(0, t0), 0, 0)  # fmt: skip
        trace = RankTrace(status, started_ns=int(t0 * 1e9))
        t = t0
        for step in range(steps):
            arrive, end = t + (0.15 if rank == ranks - 1 else 0.1), t + 0.152
            trace.spans.append(("forward", round(t * 1e9), round(arrive * 1e9), 1, None))
            call = CollectiveRecord("0", step + 1, "all_reduce", ((4,),), ("float32",), arrive,
                                    end, CallState.COMPLETED, "t.py:1")  # fmt: skip
            trace.collectives.append(call)
            trace.steps.append((round(end * 1e9), step + 1, 1))
            t = end
        traces.append(trace)
    with open(path, "w") as f:
        render_trace(traces, split_collectives(traces, int((t0 + 1e3) * 1e9)), f.write)


def extras(tmp: str, repeats: int) -> None:
    """The trace section's digest against a bare `json.load` of the same file (the stock way
    to read it), and the loss/throughput charts of 4,096 ranks x 1,024 live steps."""
    from rankscope.report.model import RunData
    from rankscope.report.traces import digest
    from rankscope.report.trends import trends_section

    path = os.path.join(tmp, "trace-bench.json")
    synthetic_trace(path, 512, 100)
    loads, digests = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        with open(path) as f:
            doc = json.load(f)
        loads.append(time.perf_counter() - started)
        started = time.perf_counter()
        digest(doc)
        digests.append(time.perf_counter() - started)
    load, dig = statistics.median(loads), statistics.median(digests)
    print(f"trace of 512 ranks x 100 steps, {os.path.getsize(path) / 2**20:.1f} MiB:")
    print(
        f"  json.load median {load:.2f} s; digest median {dig:.2f} s ({(load + dig) / load:.1f}x)"
    )
    t0 = 1_796_300_000.0
    series = tuple(
        {"rank": r, "group": "g",
         "samples": [[s, t0 + s * 0.1 + r * 1e-4, 1 / (s + 1), 4096.0] for s in range(1024)]}
        for r in range(4096)
    )  # fmt: skip
    charts = []
    for _ in range(repeats):
        started = time.perf_counter()
        trends_section(RunData(JOB, "bench", series=series), t0)
        charts.append(time.perf_counter() - started)
    took = statistics.median(charts)
    print(f"loss + tokens/s charts, 4,096 ranks x 1,024 steps: median {took:.2f} s")


def _children_cpu() -> float:
    """CPU seconds of this process's finished children (a loaded machine stretches wall time)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--snapshots", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--no-step-files", action="store_true", help="the run directory before step files"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        job_dir = synthetic_run(
            os.path.join(tmp, "runs"), args.ranks, args.snapshots, not args.no_step_files
        )
        sizes = {n: os.path.getsize(os.path.join(job_dir, n)) for n in os.listdir(job_dir)}
        steps = sum(s for n, s in sizes.items() if n.startswith("steps-"))
        sizes = {n: s for n, s in sizes.items() if not n.startswith("steps-")}
        sizes[f"{args.ranks} x steps-*.json"] = steps
        page = os.path.join(tmp, "page.html")
        cli = [sys.executable, "-m", "rankscope.cli.main"]
        whole, floor, inside, cpu = [], [], [], []
        for _ in range(args.repeats):
            started, used = time.perf_counter(), _children_cpu()
            subprocess.run([*cli, "report", job_dir, "-o", page], capture_output=True, check=False)
            whole.append(time.perf_counter() - started)
            cpu.append(_children_cpu() - used)
            started = time.perf_counter()
            subprocess.run([*cli, "events", "--help"], capture_output=True, check=True)
            floor.append(time.perf_counter() - started)
            started = time.perf_counter()
            gc.disable()  # as the command does
            html = render_html(build_report(collect_run(job_dir, None, None), time.time()))
            gc.enable()
            inside.append(time.perf_counter() - started)
        print(f"run directory: {args.ranks} ranks; files: " + ", ".join(
            f"{n} {s / 2**20:.1f} MiB" for n, s in sorted(sizes.items())))  # fmt: skip
        print(f"  rankscope report (whole CLI)    median {statistics.median(whole):.2f} s"
              f" (CPU {statistics.median(cpu):.2f} s)")  # fmt: skip
        print(f"  rankscope events --help (floor) median {statistics.median(floor):.2f} s")
        print(f"  read + build + render in process median {statistics.median(inside):.2f} s")
        print(f"  page: {len(html.encode()) / 2**20:.2f} MiB (goal < 5 MiB); goal < 3 s")
        extras(tmp, args.repeats)
        print(f"  load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
