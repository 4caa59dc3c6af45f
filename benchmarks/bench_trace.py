"""Tracing (issue 14), side by side in one run (medians of interleaved trials):

1. `rankscope.span` enter+exit: tracing off against an empty `with contextlib.nullcontext()`,
   tracing on, OpenTelemetry SDK `start_as_current_span` (in-memory exporter), and
   `torch.profiler.record_function` with the profiler off and on.
2. Bytes per recorded span in the uncompressed trace (no user args), against `ray.timeline()`
   per task (a local Ray cluster, 2,000 tiny tasks; skipped with --no-ray).
3. Tracing's overhead on the demo's training step (a 1-rank gloo group, the demo's MLP step):
   off, against on (a span around the step, step markers, the collective recorder, and a drain
   every 0.5 s from another thread, as the probe does).
4. Export of 1,000,000 spans from 4 ranks into one trace file.

Run: .venv/bin/python benchmarks/bench_trace.py [--trials N] [--no-ray]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable

LOOPS = 200_000


def per_call_ns(body: Callable[[int], None], loops: int = LOOPS) -> float:
    """CPU time of this thread per call: steadier than wall time on a shared machine."""
    start = time.thread_time_ns()
    body(loops)
    return (time.thread_time_ns() - start) / loops


def span_costs(trials: int) -> dict[str, float]:
    import rankscope
    from rankscope.trace import worker_spans

    def nullctx(n: int) -> None:
        null = contextlib.nullcontext
        for _ in range(n):
            with null():
                pass

    def span(n: int) -> None:
        s = rankscope.span
        for _ in range(n):
            with s("step"):
                pass

    def span_on(n: int) -> None:
        worker_spans.start_recording(n + 10)
        try:
            span(n)
        finally:
            worker_spans.stop_recording()

    cases: dict[str, Callable[[int], None]] = {
        "nullcontext": nullctx,
        "span off": span,
        "span on": span_on,
    }
    with contextlib.suppress(ImportError):
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        provider = TracerProvider()
        exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracer = provider.get_tracer("bench")

        def otel(n: int) -> None:
            start = tracer.start_as_current_span
            for _ in range(n):
                with start("step"):
                    pass
            exporter.clear()

        cases["otel sdk"] = otel
    with contextlib.suppress(ImportError):
        import torch

        def record_function(n: int) -> None:
            rf = torch.profiler.record_function
            for _ in range(n):
                with rf("step"):
                    pass

        def record_function_on(n: int) -> None:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
                record_function(n)

        cases["record_function off"] = record_function
        cases["record_function on"] = record_function_on
    results: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(trials):
        for name, body in cases.items():
            loops = LOOPS // 10 if name in ("otel sdk", "record_function on") else LOOPS
            results[name].append(per_call_ns(body, loops))
    return {k: statistics.median(v) for k, v in results.items()}


def bytes_per_span() -> float:
    """Bytes per span without args in a trace of 100,000 spans of 10 names on 4 ranks."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    traces = _synthetic(4, 25_000, names=10)
    from rankscope.trace.chrome import render_trace

    buf = io.StringIO()
    stats = render_trace(traces, [[] for _ in traces], buf.write)
    empty = io.StringIO()
    base = render_trace(_synthetic(4, 0), [[] for _ in traces], empty.write)
    return (stats.bytes - base.bytes) / 100_000


def _synthetic(ranks: int, per_rank: int, names: int = 1) -> list:
    from rankscope.context import RankContext
    from rankscope.runtime.protocol import ProbeInfo, ProbeState, ProbeStatus, Progress
    from rankscope.trace.model import RankTrace

    out = []
    base = time.time_ns()
    for rank in range(ranks):
        ctx = RankContext(rank, rank, ranks, "node", "10.0.0.1", "h", 100 + rank, "01000000",
                          None, "Worker", None, "env")  # fmt: skip
        status = ProbeStatus(ProbeInfo(f"p{rank}", ctx, "0", 0.0), ProbeState.ALIVE, 0, 0,
                             Progress(0, 0), 0, 0)  # fmt: skip
        trace = RankTrace(status)
        trace.started_ns = base
        trace.spans = [
            (f"phase{i % names}", base + i * 5000, base + i * 5000 + 3000, 1, None)
            for i in range(per_rank)
        ]
        out.append(trace)
    return out


def ray_timeline_bytes_per_task(tasks: int = 2000) -> float | None:
    try:
        import ray
    except ImportError:
        return None
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:

        @ray.remote
        def tiny() -> None:
            return None

        ray.get([tiny.remote() for _ in range(200)])  # warm the workers
        time.sleep(2)
        with tempfile.TemporaryDirectory() as tmp:
            before = os.path.join(tmp, "before.json")
            ray.timeline(before)
            n_before = len(_load(before))
            size_before = os.path.getsize(before)
            ray.get([tiny.remote() for _ in range(tasks)])
            deadline = time.time() + 30
            path = os.path.join(tmp, "after.json")
            while True:  # task events reach the GCS in batches, about once a second
                time.sleep(2)
                ray.timeline(path)
                events = _load(path)
                if len(events) - n_before >= tasks or time.time() > deadline:
                    break
            return (os.path.getsize(path) - size_before) / tasks
    finally:
        ray.shutdown()


def _load(path: str) -> list:
    with open(path) as f:
        return list(json.load(f))


def training_overhead(trials: int, steps: int = 300) -> tuple[float, float]:
    """Median seconds per demo training step: tracing off, on."""
    import torch
    import torch.distributed as dist
    from torch import nn

    import rankscope
    from rankscope.demo.train import train_step
    from rankscope.hang.worker_recorder import record_collectives
    from rankscope.trace import worker
    from rankscope.trace.model import TraceOptions

    record_collectives()  # on in both modes: the job's default with the setup hook
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/rdv", rank=0, world_size=1)
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        inputs = torch.randn(16, 32)
        targets = inputs.sum(dim=1, keepdim=True) * 0.1

        def run() -> float:
            """CPU seconds of the process per step (the drain thread's included)."""
            start = time.process_time()
            for _ in range(steps):
                with rankscope.span("train_step"):
                    train_step(model, optimizer, inputs, targets)
                rankscope.step()
            return (time.process_time() - start) / steps

        run()  # warm up
        off, on = [], []
        for trial in range(trials * 2):
            off.append(run())
            session = f"bench{trial}"
            worker.trace_command({"action": "start", "session": session, "options": TraceOptions()})
            stop = threading.Event()

            def drain(session: str = session, stop: threading.Event = stop) -> None:
                while not stop.wait(0.5):
                    worker.trace_command({"action": "drain", "session": session})

            drainer = threading.Thread(target=drain, daemon=True)
            drainer.start()
            on.append(run())
            stop.set()
            drainer.join()
            worker.trace_command({"action": "stop", "session": session})
        dist.destroy_process_group()
    return statistics.median(off), statistics.median(on)


def export_seconds(trials: int) -> float:
    from rankscope.trace.chrome import render_trace

    times = []
    for _ in range(trials):
        traces = _synthetic(4, 250_000, names=20)
        with tempfile.TemporaryDirectory() as tmp, open(f"{tmp}/t.json", "w") as f:
            start = time.process_time()
            render_trace(traces, [[] for _ in traces], f.write)
            times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()

    costs = span_costs(args.trials)
    print("1. span enter+exit, CPU ns per call (median of trials):")
    null = costs["nullcontext"]
    for name, ns in costs.items():
        print(f"   {name:22s} {ns:8.0f} ns   {ns / null:5.2f}x nullcontext")
    print(f"   goal: span off <= 1.5x nullcontext ({costs['span off'] / null:.2f}x), "
          f"span on <= 1000 ns ({costs['span on']:.0f} ns)")  # fmt: skip

    per_span = bytes_per_span()
    print(f"2. bytes per span in the trace (no args): {per_span:.1f} (goal <= 100)")
    if not args.no_ray:
        per_task = ray_timeline_bytes_per_task()
        if per_task is not None:
            print(f"   ray.timeline() bytes per task: {per_task:.0f} "
                  f"({per_task / per_span:.1f}x a rankscope span)")  # fmt: skip

    off, on = training_overhead(args.trials)
    print(f"3. demo training step, CPU per step: off {off * 1e6:.0f} us, traced {on * 1e6:.0f} us: "
          f"{(on / off - 1) * 100:+.2f}% (goal < 2%)")  # fmt: skip

    seconds = export_seconds(max(1, args.trials // 2))
    print(f"4. export of 1,000,000 spans from 4 ranks: {seconds:.2f} CPU s (goal < 5 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
