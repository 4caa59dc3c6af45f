"""One prepared run of rankscope's CUDA code paths on one GPU (we get one short shot at it).

Covers memory (snapshots, device-memory readers, the allocation history, a real CUDA OOM),
consistency (CPU vs CUDA fingerprints, their speed), monitor (`watch_nan`, comm-bench), the
collective recorder's CUDA events, tracing with torch.profiler's GPU events, and the doctor's GPU
facts, through rankscope's own functions, without Ray (a world-size-1 group where one is needed).

Every check runs in a thread of its own with a time limit (the tracing check in the main thread,
under SIGALRM, as a training loop would run the profiler), and ends ok, failed (the exception's
first line, the innermost frame and the check's own line; for a timeout, where it hung) or
skipped (why); one failure never stops the others. Each result is printed as it completes and
the JSON is rewritten after every check, so a killed run still leaves what it did. Without CUDA
the GPU-only checks are skipped and the others run on the CPU (gloo instead of NCCL), so the
script itself is tested where there is no GPU.

Run on the device machine (no network, no Ray; exit 1 when a check failed):
    PYTHONPATH=src python3 benchmarks/gpu_check.py --out $OUT/gpu_check.json
Options: --budget S (all checks, default 240 s), --only PREFIX... (e.g. `--only memory dist
hang`: the group checks need `dist`). Here: .venv/bin/python benchmarks/gpu_check.py
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import faulthandler
import json
import os
import pickle
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

GIB, MIB = 1 << 30, 1 << 20


class Skip(Exception):
    """The check cannot run here (the reason is its message)."""


class Fail(Exception):
    """A verified property does not hold."""


def expect(cond: object, what: str) -> None:
    if not cond:
        raise Fail(what)


@dataclass
class Ctx:
    cuda: bool
    device: torch.device
    tmp: str
    deadline: float
    group: str = ""
    """The backend of the world-size-1 default group while it is up."""
    hung: bool = False
    """A check timed out: collectives after it are not tried."""

    def need_cuda(self) -> None:
        if not self.cuda:
            raise Skip("no CUDA")

    def need_group(self) -> None:
        if self.hung:
            raise Skip("an earlier check hung")
        if not self.group:
            raise Skip("no process group (dist.init did not succeed)")


def sync(ctx: Ctx) -> None:
    if ctx.cuda:
        torch.cuda.synchronize()


def timed(ctx: Ctx, fn: Callable[[], Any], runs: int) -> float:
    """Median seconds of `runs` calls after one warm-up, the device synchronized around each."""
    fn()
    times = []
    for _ in range(runs):
        sync(ctx)
        start = time.perf_counter()
        fn()
        sync(ctx)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------------------------- checks
def check_memory_snapshot(ctx: Ctx) -> dict[str, Any]:
    from rankscope.memory import worker_snapshot as snap

    ctx.need_cuda()
    expect(snap.cuda_device_index("cuda:0") == 0, "cuda_device_index('cuda:0') != 0")
    x = torch.empty(GIB, dtype=torch.uint8, device="cuda:0")
    s = snap.take_snapshot(cuda_device=0, tag="gpu-check", uss=True)
    c = s.cuda
    expect(c is not None, "take_snapshot(cuda_device=0).cuda is None")
    assert c is not None
    free, total = torch.cuda.mem_get_info(0)
    expect(c.allocated >= GIB, f"allocated {c.allocated} < 1 GiB")
    expect(c.reserved >= c.allocated, "reserved < allocated")
    expect(c.active >= GIB, f"active {c.active} < 1 GiB")
    expect(0 <= c.inactive_split <= c.reserved, "inactive_split out of range")
    expect(c.device_total == total, f"device_total {c.device_total} != mem_get_info {total}")
    expect(c.device_used >= c.reserved, "device_used < reserved")
    expect(abs(c.device_used - (total - free)) < GIB, "device_used far from mem_get_info")
    del x
    fields = {k: getattr(c, k) for k in ("allocated", "reserved", "active", "inactive_split")}
    return {
        **fields,
        "device_used": c.device_used,
        "device_total": c.device_total,
        "outside_pytorch": c.outside_pytorch,
        "summary": f"allocated {c.allocated / GIB:.2f} GiB, used {c.device_used / GIB:.1f} "
        f"of {c.device_total / GIB:.1f} GiB",
    }


def check_memory_readers(ctx: Ctx) -> dict[str, Any]:
    """Every other reader of device memory: `gpus` (tenancy, co-tenants), the monitor's and the
    alerts' readings, the memory handler's device."""
    from rankscope.alerts import worker as alerts_worker
    from rankscope.memory import worker as memory_worker
    from rankscope.memory import worker_gpus
    from rankscope.monitor import worker as monitor_worker

    ctx.need_cuda()
    x = torch.empty(GIB, dtype=torch.uint8, device="cuda:0")
    free, total = torch.cuda.mem_get_info()
    t, tenants = worker_gpus.current_tenancy(), worker_gpus.co_tenants(0)
    use, reading = monitor_worker.memory_use(), alerts_worker._read_memory()
    expect((t.torch_reserved or 0) >= GIB, f"gpus torch_reserved {t.torch_reserved} < 1 GiB")
    expect(t.torch_device_total == total, "gpus torch_device_total != mem_get_info total")
    expect(use.device_total == total, f"monitor memory_use total {use.device_total} != {total}")
    expect(abs(use.device_used - (total - free)) < GIB, "monitor memory_use used is off")
    expect(reading.device_total == total, "alerts _read_memory device total is off")
    expect(reading.device_used >= GIB, "alerts _read_memory device used < 1 GiB")
    expect(memory_worker._initialised_cuda_device() == 0, "memory handler sees no CUDA device")
    del x
    return {
        "tenancy": dataclasses.asdict(t),
        "co_tenants": tenants,
        "monitor_memory_use": dataclasses.asdict(use),
        "alerts_reading": dataclasses.asdict(reading),
        "summary": f"{len(t.devices)} GPUs in nvidia-smi; {tenants or 'no co_tenants line'}",
    }


def check_memory_profiler(ctx: Ctx) -> dict[str, Any]:
    from rankscope.memory import MemoryProfiler

    ctx.need_cuda()
    prof = MemoryProfiler(track_allocations=True, device="cuda:0", label="gpu-check")
    keep = []
    try:
        expect(prof.device == 0, f"profiler device {prof.device}")
        for i in range(20):
            keep.append(torch.empty(64 * MIB, dtype=torch.uint8, device="cuda:0"))
            prof.take_snapshot(step=i)
        snaps = prof.snapshots
        first, last = snaps[0].cuda, snaps[-1].cuda
        expect(first is not None and last is not None, "snapshots without CUDA memory")
        assert first is not None and last is not None
        expect(last.allocated - first.allocated >= 19 * 64 * MIB, "allocated did not grow")
        path = prof.dump_allocation_history(os.path.join(ctx.tmp, "alloc_history.pickle"))
        size = os.path.getsize(path)
        expect(size > 0, "allocation history file is empty")
        with open(path, "rb") as f:
            history = pickle.load(f)
        traces = history.get("device_traces") or [[]]
        allocs = sum(1 for e in traces[0] if e.get("action") == "alloc")
        expect(allocs >= 20, f"{allocs} alloc events in the history (< 20)")
        html = prof.generate_report(os.path.join(ctx.tmp, "memory.html"))
        leaks = [f.metric for f in prof.leak_report(suspects=0).findings if f.leak]
    finally:
        prof.close()
        del keep
    return {
        "history_bytes": size,
        "alloc_events": allocs,
        "segments": len(history.get("segments", [])),
        "report_bytes": os.path.getsize(html),
        "leaks": leaks,
        "summary": f"history {size / MIB:.1f} MiB, {allocs} allocs, leaks {leaks}",
    }


def check_memory_oom(ctx: Ctx) -> dict[str, Any]:
    from rankscope.memory import analysis, oom_guard

    ctx.need_cuda()
    hold = torch.empty(GIB, dtype=torch.uint8, device="cuda:0")
    guard = oom_guard(path=os.path.join(ctx.tmp, "oom.json"), device=0)
    message, notes = "", []
    try:
        with guard:
            torch.empty(4 << 40, dtype=torch.uint8, device="cuda:0")  # plain cudaMalloc of 4 TiB
    except torch.OutOfMemoryError as exc:
        message = str(exc)
        notes = list(getattr(exc, "__notes__", []))
    expect(message, "no torch.OutOfMemoryError for 4 TiB")
    allocated = torch.cuda.memory_allocated(0)
    total = torch.cuda.mem_get_info(0)[1]
    del hold
    torch.cuda.empty_cache()
    parsed = analysis.parse_cuda_oom(message)
    expect(parsed is not None, f"parse_cuda_oom gave None for: {message[:200]}")
    assert parsed is not None
    expect(parsed.requested == 4 << 40, f"requested {parsed.requested} != 4 TiB")
    expect(parsed.total is not None and abs(parsed.total - total) < 16 * MIB, "total is off")
    expect(parsed.free is not None and 0 <= parsed.free <= total, "free is off")
    expect(
        parsed.allocated is not None and abs(parsed.allocated - allocated) < 16 * MIB,
        f"allocated {parsed.allocated} != {allocated}",
    )
    expect(parsed.process_in_use is not None, "no 'this process has ... in use'")
    report = guard.last_report
    expect(report is not None, "oom_guard made no report")
    assert report is not None
    expect(report.parsed == parsed, "oom_guard parsed the message differently")
    expect(os.path.getsize(report.path) > 0, "no OOM report file")
    cuda = report.snapshot.cuda if report.snapshot is not None else None
    expect(cuda is not None and cuda.num_ooms >= 1, "snapshot num_ooms < 1")
    expect(notes, "oom_guard added no note to the exception")
    verdicts = [f.verdict.value for f in report.findings]
    return {
        "message": message[:600],
        "parsed": dataclasses.asdict(parsed),
        "verdicts": verdicts,
        "co_tenants": report.extra.get("co_tenants", ""),
        "summary": f"parsed 4 TiB requested of {(parsed.total or 0) / GIB:.1f} GiB; {verdicts}",
    }


def check_memory_usage(ctx: Ctx) -> dict[str, Any]:
    from rankscope.memory import profile_memory_usage

    width = 4096 if ctx.cuda else 512
    model = torch.nn.Sequential(
        torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, width)
    ).to(ctx.device)
    p = profile_memory_usage(
        model, torch.randn(256, width, device=ctx.device), loss_fn=lambda out: out.sum()
    )
    expect(p.source == "cuda allocator" or not ctx.cuda, f"source {p.source}")
    expect({ph.name for ph in p.phases} >= {"forward", "backward"}, "phases missing")
    expect(sum(m.activations for m in p.modules) > 0, "no activations counted")
    return {
        "source": p.source,
        "phases": [dataclasses.asdict(ph) for ph in p.phases],
        "summary": f"{p.source}, phases {[(ph.name, ph.peak_increase) for ph in p.phases]}",
    }


def _views(base: torch.Tensor, bf: torch.Tensor) -> dict[str, torch.Tensor]:
    return {
        "transposed": base.t(),
        "strided[::3]": base[:, ::3],
        "bf16[1:] (mid-word offset)": bf[1:],
        "expanded": base[:1].expand(64, -1),
        "permuted": base.view(base.shape[0], -1, 7).permute(2, 0, 1),
    }


def check_fingerprints(ctx: Ctx) -> dict[str, Any]:
    """The CPU's fingerprints (numba kernel when present) against torch ops on the CPU and on
    CUDA: dtypes, sizes around the chunk boundaries, NaN/Inf, non-contiguous views."""
    from unittest import mock

    from rankscope.consistency import cpu_hash
    from rankscope.consistency import torch_hash as th
    from rankscope.consistency.fingerprint import fingerprint_tensors

    gen = torch.Generator().manual_seed(0)
    flat: dict[str, torch.Tensor] = {}
    bounds = {
        "small": th.SMALL_WORDS * 8,
        "chunk": th.CHUNK_WORDS * 8,
        "cuda-chunk": th._CUDA_CHUNK_BYTES,
        "2 cuda-chunks": 2 * th._CUDA_CHUNK_BYTES,
    }
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.uint8):
        size = torch.empty((), dtype=dtype).element_size()
        lo, hi = (-(2**62), 2**62) if size == 8 else (0, 256)
        for label, nbytes in bounds.items():
            for d in (-1, 0, 1):
                n = nbytes // size + d
                if dtype.is_floating_point:
                    t = torch.randn(n, generator=gen).to(dtype)
                else:
                    t = torch.randint(lo, hi, (n,), generator=gen, dtype=dtype)
                flat[f"{label}{d:+d} {dtype}"] = t
        flat[f"one {dtype}"] = torch.ones(1, dtype=dtype)
    special = torch.randn(th.CHUNK_WORDS * 3 + 5, generator=gen)
    special[7], special[-3] = float("nan"), float("inf")
    flat["nan+inf float32"] = special
    flat["nan bfloat16"] = special.to(torch.bfloat16)
    base = torch.randn(1021 + 3, 777, generator=gen)

    def on(device: torch.device) -> dict[str, torch.Tensor]:
        out = {k: v.to(device) for k, v in flat.items()}
        b = base.to(device)
        return {**out, **_views(b, b.to(torch.bfloat16).reshape(-1))}

    def prints(tensors: dict[str, torch.Tensor]) -> list[tuple[int, int, int]]:
        return [(f.hash, f.nan, f.inf) for f in fingerprint_tensors(list(tensors.items()))]

    cpu = on(torch.device("cpu"))
    names, reference = list(cpu), prints(cpu)
    with mock.patch.object(cpu_hash, "available", lambda: False):  # torch ops on the CPU
        others = {"cpu torch ops": (cpu, prints(cpu))}
    if ctx.cuda:
        gpu = on(ctx.device)
        others["cuda"] = (gpu, prints(gpu))
        devices = {f.device for f in fingerprint_tensors(list(gpu.items())[:3])}
        expect(devices == {"cuda:0"}, f"CUDA fingerprints say {devices}")
    bad: list[str] = []
    for label, (tensors, got) in others.items():
        bad += [f"{label} {k}: {g} != {r}" for k, g, r in zip(names, got, reference, strict=True)
                if g != r]  # fmt: skip
        single = [k for k, g in zip(names, got, strict=True) if prints({k: tensors[k]})[0] != g]
        bad += [f"{label} {k}: batched != single" for k in single]
        views = _views(base, base)
        bad += [f"{label} {k}: view != contiguous copy" for k in views
                if prints({k: tensors[k].contiguous()})[0] != got[names.index(k)]]  # fmt: skip
    nonfinite = {k: r[1:] for k, r in zip(names, reference, strict=True) if r[1] or r[2]}
    expect(nonfinite.get("nan+inf float32") == (1, 1), f"NaN/Inf counts: {nonfinite}")
    expect(not bad, f"{len(bad)} differences, e.g. {bad[:3]}")
    return {
        "cases": len(names),
        "compared": ["cpu (numba)" if cpu_hash.available() else "cpu", *others],
        "nonfinite": nonfinite,
        "summary": f"{len(names)} tensors agree: cpu vs {', '.join(others)}; batched == single",
    }


def check_fingerprint_speed(ctx: Ctx) -> dict[str, Any]:
    from rankscope.consistency import cpu_hash
    from rankscope.consistency.fingerprint import fingerprint_tensors

    out: dict[str, Any] = {"numba_kernel": cpu_hash.available()}
    cpu = torch.randn(128 * MIB, dtype=torch.bfloat16)  # 256 MiB
    seconds = timed(ctx, lambda: fingerprint_tensors([("x", cpu)]), 3)
    out["cpu_gbs"] = round(cpu.nbytes / seconds / 1e9, 2)
    summary = f"cpu {out['cpu_gbs']} GB/s (256 MiB)"
    if ctx.cuda:
        x = torch.randn(GIB, dtype=torch.bfloat16, device="cuda")  # 2 GiB
        seconds = timed(ctx, lambda: fingerprint_tensors([("x", x)]), 5)
        plain = timed(ctx, lambda: x.sum(dtype=torch.float32).item(), 5)
        out.update(
            gpu_gbs=round(x.nbytes / seconds / 1e9, 1),
            gpu_sum_gbs=round(x.nbytes / plain / 1e9, 1),
            gpu_ms=round(seconds * 1e3, 2),
        )
        summary = f"cuda {out['gpu_gbs']} GB/s (x.sum: {out['gpu_sum_gbs']}), " + summary
        del x
        torch.cuda.empty_cache()
    out["summary"] = summary
    return out


def check_watch_nan(ctx: Ctx) -> dict[str, Any]:
    from rankscope.monitor import worker_nan

    def model() -> torch.nn.Sequential:
        return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8)).to(ctx.device)

    x = torch.randn(16, 64, device=ctx.device)
    m = model()
    w = worker_nan.watch_nan(m)
    m(x).sum().backward()
    expect(w.check() == "", f"finite forward reported {w.found!r}")
    w.remove()
    m = model()
    w = worker_nan.watch_nan(m)
    bad = x.clone()
    bad[3, 5] = float("nan")
    m(bad)
    found_act = w.check()
    expect(found_act.startswith("activation in 0"), f"NaN input: {found_act!r}")
    w.remove()
    m = model()
    w = worker_nan.watch_nan(m)
    m(x).sum().backward()
    grad = dict(m.named_parameters())["1.weight"].grad
    expect(grad is not None, "no gradient after backward")
    assert grad is not None
    grad[0, 0] = float("inf")
    found_grad = w.check()
    expect(found_grad.startswith("gradient in 1"), f"inf gradient: {found_grad!r}")
    w.remove()
    n = GIB // 4 if ctx.cuda else 16 * MIB  # 1 GiB of float32 on CUDA
    big = torch.randn(n, device=ctx.device)
    expect(not worker_nan._any_nonfinite([big]), "fused check: finite 1 GiB tensor flagged")
    check_s = timed(ctx, lambda: worker_nan._any_nonfinite([big]), 5)
    ident = torch.nn.Sequential(torch.nn.Identity(), torch.nn.Dropout(0.0)).eval()
    bare_s = timed(ctx, lambda: ident(big), 5)
    w = worker_nan.watch_nan(ident)
    watched_s = timed(ctx, lambda: (ident(big), w.sums.pop()), 5)  # the sum it kept
    w.remove()
    big[-1] = float("nan")
    expect(worker_nan._any_nonfinite([big]), "fused check missed a NaN at the end")
    big[-1] = float("-inf")
    expect(worker_nan._any_nonfinite([big]), "fused check missed a -inf at the end")
    mib = big.nbytes / MIB
    return {
        "activation": found_act,
        "gradient": found_grad,
        "tensor_mib": mib,
        "check_ms": round(check_s * 1e3, 3),
        "forward_overhead_ms": round((watched_s - bare_s) * 1e3, 3),
        "summary": f"{mib:.0f} MiB: check {check_s * 1e3:.2f} ms, watched forward "
        f"+{(watched_s - bare_s) * 1e3:.2f} ms",
    }


def check_trace(ctx: Ctx) -> dict[str, Any]:
    from rankscope import __version__
    from rankscope.context import get_context
    from rankscope.runtime.api import step
    from rankscope.runtime.protocol import ProbeInfo, ProbeState, ProbeStatus, Progress
    from rankscope.trace import debug_decorator, span, worker
    from rankscope.trace.analysis import merge_chunks, split_collectives
    from rankscope.trace.chrome import render_trace
    from rankscope.trace.model import TraceOptions

    a = torch.randn(2048, 2048, device=ctx.device)

    @debug_decorator(memory_monitoring=True)
    def work(a: torch.Tensor) -> torch.Tensor:
        return (a @ a).relu().sum()

    sid = "gpu-check"
    opts = TraceOptions(ttl_s=120, torch_profiler_steps=2, ray_tasks=False)
    chunks = [worker.trace_command({"action": "start", "session": sid, "options": opts})]
    step()  # the profiler starts at this step boundary, in this thread
    for i in range(4):
        with span("gpu_step", i=i):
            work(a)
            sync(ctx)
        step()
    chunks.append(worker.trace_command({"action": "drain", "session": sid}))
    chunks.append(worker.trace_command({"action": "stop", "session": sid}))
    errors = [e for c in chunks for e in c.errors]
    expect(not errors, f"trace errors: {errors}")
    now = time.time()
    status = ProbeStatus(
        ProbeInfo("gpu-check", get_context(), __version__, now),
        ProbeState.ALIVE,
        now,
        now,
        Progress(0, now),
        0,
        0,
    )
    trace = merge_chunks(status, chunks)
    path = os.path.join(ctx.tmp, "trace.json")
    with open(path, "w") as f:
        render_trace([trace], split_collectives([trace], time.time_ns()), f.write)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    gpu_tracks = sorted(t for t in tracks if "GPU" in t)
    names = {e.get("name") for e in events if e.get("ph") == "X"}
    counters = [e["args"] for e in events if e.get("ph") == "C"]
    spans_attrs = [s[4] for s in trace.spans if s[0].endswith("work") and s[4]]
    expect("gpu_step" in names, "no gpu_step span in the trace file")
    expect(len(trace.spans) > 20, f"only {len(trace.spans)} spans (torch.profiler's missing?)")
    if ctx.cuda:
        expect(gpu_tracks, f"no GPU track from torch.profiler; tracks: {sorted(tracks)[:8]}")
        expect(any("cuda_allocated_MiB" in c for c in counters), "no CUDA memory counter")
        expect(
            any("cuda_delta_bytes" in (s or {}) for s in spans_attrs),
            "debug_decorator recorded no cuda_delta_bytes",
        )
    gpu_events = sum(1 for s in trace.spans if trace.threads.get(s[3], "").startswith("GPU"))
    return {
        "spans": len(trace.spans),
        "gpu_events": gpu_events,
        "gpu_tracks": gpu_tracks,
        "counters": counters[-1:],
        "bytes": os.path.getsize(path),
        "summary": f"{len(trace.spans)} spans, {gpu_events} on GPU tracks {gpu_tracks}",
    }


def check_doctor(ctx: Ctx) -> dict[str, Any]:
    from rankscope.doctor import worker
    from rankscope.doctor.preflight import checks, collect_node
    from rankscope.doctor.preflight.model import ClusterFacts, NodeFacts

    names = worker._gpu_names(torch)
    out: dict[str, Any] = {
        "cuda": worker._torch_cuda_version(torch),
        "nccl": worker._nccl_version(torch),
        "gpu_names": names,
    }
    raw = collect_node.node_facts({"tmp": ctx.tmp})
    node = NodeFacts.from_probe("local", "local", raw, {"GPU": float(len(raw["gpus"]["devices"]))})
    verdict = checks.check_gpus([node], ClusterFacts("local", None, None, None))
    out.update(
        preflight_torch_cuda=raw["torch_cuda"],
        preflight_gpus=raw["gpus"],
        xids=raw["xids"],
        check_gpus=f"{verdict.status.value}: {verdict.summary}",
    )
    expect(out["cuda"] == torch.version.cuda, "facts cuda != torch.version.cuda")
    if ctx.cuda:
        expect(out["nccl"] == ".".join(map(str, torch.cuda.nccl.version())), "facts nccl is off")
        expect(torch.cuda.get_device_name(0) in names, f"device name not in {names}")
        expect(raw["torch_cuda"] == torch.version.cuda, "preflight torch_cuda is off")
        expect(raw["gpus"]["devices"], f"preflight saw no GPU: {raw['gpus']['error']}")
    out["summary"] = f"nccl {out['nccl']}, {names}; check_gpus {out['check_gpus'][:60]}"
    return out


# ------------------------------------------------------------------ with a process group
def check_dist_init(ctx: Ctx) -> dict[str, Any]:
    backend = "nccl" if ctx.cuda else "gloo"
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{free_port()}",
        rank=0,
        world_size=1,
        timeout=timedelta(seconds=60),
        device_id=ctx.device if ctx.cuda else None,
    )
    ctx.group = backend
    x = torch.ones(4, device=ctx.device)
    dist.all_reduce(x)
    sync(ctx)
    return {"backend": backend, "summary": f"{backend} world size 1 up"}


def check_collective_recorder(ctx: Ctx) -> dict[str, Any]:
    from rankscope.hang.model import CallState
    from rankscope.hang.worker_recorder import (
        collective_recorder,
        record_collectives,
        stop_recording,
    )
    from rankscope.monitor import worker as monitor_recorder
    from rankscope.monitor.collectives import step_waits

    ctx.need_group()
    record_collectives()
    rec = collective_recorder()
    out: dict[str, Any] = {}
    try:
        x = torch.ones(16 * MIB, device=ctx.device)  # 64 MiB
        if ctx.cuda:  # the GPU is busy: the call returns, the record must stay STARTED
            torch.cuda._sleep(1_000_000_000)  # ~0.5 s of GPU clock cycles
            dist.all_reduce(x)
            pending = rec.snapshot(last=1).records[-1]
            stuck = rec.in_flight(time.time() + 1)
            torch.cuda.synchronize()
            done = rec.snapshot(last=1).records[-1]
            expect(pending.state is CallState.STARTED, f"while the GPU sleeps: {pending.state}")
            expect(stuck is not None, "in_flight() found no call while the GPU slept")
            expect(done.state is CallState.COMPLETED, f"after synchronize: {done.state}")
            out["pending_s"] = round((done.end or 0) - done.start, 3)
        times, latencies, event_ms = [time.time()], [], []
        for _ in range(20):
            start = torch.cuda.Event(enable_timing=True) if ctx.cuda else None
            end = torch.cuda.Event(enable_timing=True) if ctx.cuda else None
            if start is not None:
                start.record()
            work = dist.all_reduce(x, async_op=True)
            work.wait()
            if end is not None and start is not None:
                end.record()
                end.synchronize()
                event_ms.append(start.elapsed_time(end))
            rec.poll()
            r = rec.snapshot(last=1).records[-1]
            expect(r.state is CallState.COMPLETED and r.end is not None, f"record {r.state}")
            latencies.append((r.end or 0) - r.start)
            times.append(time.time())
        expect(all(0 < s < 1 for s in latencies), f"latencies out of (0, 1) s: {latencies}")
        recs = monitor_recorder._recorded_collectives(64)
        expect(recs and recs[-1].op == "all_reduce", "monitor sees no all_reduce records")
        waits = step_waits(times, recs)
        expect(len(waits) == 20 and all(w > 0 for w in waits), f"step_waits {waits}")
        usage = monitor_recorder.memory_use()
        if ctx.cuda:
            expect(usage.device_total > 0, "monitor memory_use: no device memory")
        out.update(
            median_latency_ms=round(statistics.median(latencies) * 1e3, 3),
            cuda_event_ms=round(statistics.median(event_ms), 3) if event_ms else None,
            groups=rec.snapshot().groups,
        )
    finally:
        stop_recording()
    out["summary"] = (
        f"all_reduce 64 MiB: recorded {out['median_latency_ms']} ms "
        f"(cuda events {out['cuda_event_ms']} ms)"
    )
    return out


def check_consistency_verify(ctx: Ctx) -> dict[str, Any]:
    import rankscope

    ctx.need_group()
    tensors = {
        "w": torch.randn(1024, 1024, device=ctx.device),
        "b": torch.randn(3, device=ctx.device).to(torch.bfloat16),
    }
    report = rankscope.verify_distributed_tensors(tensors, operation_name="gpu-check")
    expect(report.ok and len(report.tensors) == 2, f"report not ok: {report}")
    spread = rankscope.inspect_distributed_tensor(tensors["w"], "w")
    return {
        "transport": report.transport,
        "spread": str(spread)[:300],
        "summary": f"ok over {report.transport}",
    }


def check_dist_destroy(ctx: Ctx) -> dict[str, Any]:
    ctx.need_group()
    dist.destroy_process_group()
    ctx.group = ""
    return {"summary": "destroyed"}


def check_commbench(ctx: Ctx) -> dict[str, Any]:
    from rankscope.monitor.collect_commbench import BenchRank
    from rankscope.monitor.comm import bus_bandwidth, message_sizes

    if ctx.hung or ctx.group:
        raise Skip("an earlier check hung, or the group is still up")
    backend = "nccl" if ctx.cuda else "gloo"
    rank = BenchRank(0, 1, backend)
    try:
        address = rank.address()
    except OSError as exc:  # no name for this host: its port part is what we skip
        address = ("?", free_port())
        print(f"  BenchRank.address(): {exc}", flush=True)
    rank.join("127.0.0.1", address[1])
    try:
        sizes = message_sizes(largest=(256 if ctx.cuda else 4) * MIB)
        timed_calls = rank.collectives(sizes, 15.0 if ctx.cuda else 5.0)
    finally:
        rank.leave()
    rows = [(op, n, s, *bus_bandwidth(op, n, s, 1)) for op, n, s in timed_calls]
    expect(rows and all(0 < r[2] < 1 for r in rows), f"timings out of (0, 1) s: {rows}")
    small = rows[0]
    big = max((r for r in rows if r[0] == "all_reduce"), key=lambda r: r[1])
    return {
        "address": list(address),
        "rows (op, bytes, s, algbw GB/s, busbw GB/s)": rows,
        "summary": f"{backend}: all_reduce 1 KB {small[2] * 1e6:.1f} us, {big[1] // MIB} MiB "
        f"algbw {big[3]:.1f} GB/s (busbw is 0 at n=1)",
    }


CHECKS: list[tuple[str, Callable[[Ctx], dict[str, Any]], float]] = [
    ("memory.snapshot", check_memory_snapshot, 30),
    ("memory.readers", check_memory_readers, 30),
    ("memory.profiler", check_memory_profiler, 60),
    ("memory.oom", check_memory_oom, 60),
    ("memory.usage_profile", check_memory_usage, 30),
    ("consistency.fingerprints", check_fingerprints, 120),
    ("consistency.speed", check_fingerprint_speed, 60),
    ("monitor.watch_nan", check_watch_nan, 60),
    ("trace.profiler", check_trace, 60),  # in the main thread, as a training loop runs it
    ("doctor.facts", check_doctor, 30),
    ("dist.init", check_dist_init, 60),
    ("hang.collective_recorder", check_collective_recorder, 60),
    ("consistency.verify", check_consistency_verify, 60),
    ("dist.destroy", check_dist_destroy, 30),
    ("monitor.commbench", check_commbench, 90),
]


# --------------------------------------------------------------------------------- runner
MAIN_THREAD = {"trace.profiler"}


HELPERS = {"expect", "target", "alarm", "run_check", "timed"}


def frames_of(frames: list[traceback.FrameSummary]) -> dict[str, str]:
    """The innermost frame, and the innermost one in a check of this file."""

    def text(f: traceback.FrameSummary) -> str:
        return f"{os.path.relpath(f.filename)}:{f.lineno} in {f.name}"

    ours = [f for f in frames if f.filename == __file__ and f.name not in HELPERS]
    return {"frame": text(frames[-1]) if frames else "", "where": text(ours[-1]) if ours else ""}


def run_check(
    name: str, fn: Callable[[Ctx], dict[str, Any]], limit: float, ctx: Ctx
) -> dict[str, Any]:
    result: dict[str, Any] = {"name": name, "status": "failed", "device": str(ctx.device)}
    left = ctx.deadline - time.monotonic()
    if left < 5:
        return {**result, "status": "skipped", "reason": "out of the time budget", "seconds": 0}

    def target() -> None:
        try:
            if ctx.cuda:
                torch.cuda.set_device(0)
            details = fn(ctx)
            result.update(status="ok", summary=details.pop("summary", ""), details=details)
        except Skip as exc:
            result.update(status="skipped", reason=str(exc))
        except BaseException as exc:
            text = (str(exc).strip().splitlines() or [""])[0][:300]
            result.update(frames_of(traceback.extract_tb(exc.__traceback__)))
            result["error"] = f"{type(exc).__name__}: {text}"

    start, limit = time.perf_counter(), min(limit, left)
    if name in MAIN_THREAD:  # torch.profiler records the thread that starts it: this one

        def alarm(signum: int, frame: Any) -> None:
            raise TimeoutError(f"timed out after {limit:.0f} s (SIGALRM)")

        signal.signal(signal.SIGALRM, alarm)
        signal.alarm(max(1, int(limit)))
        try:
            target()
        finally:
            signal.alarm(0)
    else:
        thread = threading.Thread(target=target, name=f"check {name}", daemon=True)
        thread.start()
        thread.join(limit)
        if thread.is_alive():
            ctx.hung = True
            result = {**result, "status": "failed", "error": f"timed out after {limit:.0f} s"}
            stack = sys._current_frames().get(thread.ident or 0)  # where it hangs
            result.update(frames_of(traceback.extract_stack(stack)) if stack else {})
    result["seconds"] = round(time.perf_counter() - start, 2)
    if ctx.cuda:
        with contextlib.suppress(Exception):
            torch.cuda.empty_cache()
    return result


def line(r: dict[str, Any]) -> str:
    where = f" [{r.get('where') or r.get('frame')}]" if r.get("frame") else ""
    text = r.get("summary") or r.get("reason") or f"{r.get('error')}{where}"
    return f"{r['name']:<26} {r['status']:<8} {r['seconds']:>7.2f}s  {text}"


def write_json(path: str, meta: dict[str, Any], results: list[dict[str, Any]]) -> None:
    temp = f"{path}.tmp"
    with open(temp, "w") as f:
        json.dump({"meta": meta, "checks": results}, f, indent=1, default=str)
    os.replace(temp, path)


def environment(cuda: bool, tmp: str) -> dict[str, Any]:
    """What ran: versions, the device, rankscope's level and whether numba hashes CPU tensors."""
    import rankscope
    from rankscope import level
    from rankscope.consistency import cpu_hash

    meta: dict[str, Any] = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "nccl": None,
        "device": "cpu",
        "python": sys.version.split()[0],
        "rankscope": rankscope.__version__,
        "level": level.current().level,
        "numba": cpu_hash.available(),
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "tmp": tmp,
    }
    if cuda:
        props = torch.cuda.get_device_properties(0)
        meta.update(
            nccl=".".join(map(str, torch.cuda.nccl.version())),
            device=f"{props.name} (sm {props.major}.{props.minor}, "
            f"{props.total_memory / GIB:.1f} GiB, {torch.cuda.device_count()} visible)",
        )
    return meta


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu_check.json")
    parser.add_argument("--budget", type=float, default=240.0, help="seconds for all checks")
    parser.add_argument("--only", nargs="*", help="names (or prefixes) of checks to run")
    args = parser.parse_args()
    faulthandler.dump_traceback_later(args.budget + 45, exit=True)  # the last resort
    cuda = torch.cuda.is_available()
    tmp = tempfile.mkdtemp(prefix="gpu_check-")
    ctx = Ctx(
        cuda,
        torch.device("cuda", 0) if cuda else torch.device("cpu"),
        tmp,
        time.monotonic() + args.budget,
    )
    try:
        meta = environment(cuda, tmp)
    except Exception as exc:  # e.g. rankscope does not import: every check will say why
        meta = {"torch": torch.__version__, "cuda": cuda, "error": f"{type(exc).__name__}: {exc}"}
    print(" ".join(f"{k}={v}" for k, v in meta.items()), flush=True)
    results: list[dict[str, Any]] = []
    for name, fn, limit in CHECKS:
        if args.only and not any(name.startswith(o) for o in args.only):
            continue
        results.append(run_check(name, fn, limit, ctx))
        print(line(results[-1]), flush=True)
        meta["ray_imported"] = "ray" in sys.modules
        write_json(args.out, meta, results)
    if dist.is_initialized() and not ctx.hung:  # a group check failed before dist.destroy
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    faulthandler.cancel_dump_traceback_later()
    counts = {s: sum(r["status"] == s for r in results) for s in ("ok", "failed", "skipped")}
    print(f"\n{'check':<26} {'status':<8} {'time':>8}  summary / reason / error", flush=True)
    for r in results:
        print(line(r), flush=True)
    print(f"{counts} ray imported: {'ray' in sys.modules}; json: {args.out}", flush=True)
    code = 1 if counts["failed"] else 0
    if ctx.hung:  # a thread stuck in a collective could block the interpreter's exit
        sys.stdout.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
