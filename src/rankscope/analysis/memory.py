"""Memory verdicts from snapshots: leak trends, fragmentation, memory outside PyTorch, OOMs.

Pure functions over `MemorySnapshot` records (no Ray, no torch, no I/O), so every rule is tested
with synthetic or recorded numbers. The leak test is a Theil-Sen slope (the median of pairwise
slopes: robust to spikes) combined with a monotonicity criterion (Kendall's tau, or minima that
keep rising), so a sawtooth that returns to its baseline is never called a leak.
"""

from __future__ import annotations

import enum
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from rankscope.memory.records import (
    GIB,
    LEAK_METRICS,
    METRICS,
    MIB,
    AllocationSite,
    CudaMemory,
    MemorySnapshot,
)

LATE_START_RATIO = 1.5
"""The recent half's slope must be this much steeper to report a leak as starting late."""
MAX_TREND_POINTS = 400
"""Series are thinned to this many points before the O(n^2) pairwise slopes."""


class Verdict(str, enum.Enum):
    """What a memory finding is about; each has one piece of advice."""

    LEAK = "leak"
    """Memory grows step after step and does not come back down."""
    FRAGMENTATION = "fragmentation"
    """PyTorch's cache holds far more than its tensors use, in pieces too small to reuse."""
    OUTSIDE_PYTORCH = "outside_pytorch"
    """The device is used by something other than this process's tensors and cache."""
    ACTIVATIONS = "activations"
    """The OOM happened in forward or backward: activations are the peak."""
    HOST_EXHAUSTED = "host_exhausted"
    """The node's RAM ran out (or nearly): Ray's memory monitor kills workers there."""
    TENSORS_FILL_DEVICE = "tensors_fill_device"
    """Live tensors (weights, gradients, optimizer state, activations) fill the device."""
    DEVICE_HIGH = "device_high"
    """Alert: the device is nearly full."""
    HOST_HIGH = "host_high"
    """Alert: the node is nearly out of RAM."""


ADVICE = {
    Verdict.LEAK: "look at the suspects (MemoryProfiler(track_allocations=True)); objects kept "
    "across steps (lists of losses or tensors that still hold their graph: use .item() or "
    ".detach()) are the usual cause",
    Verdict.FRAGMENTATION: "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or keep "
    "tensor shapes stable between steps",
    Verdict.OUTSIDE_PYTORCH: "look at NCCL buffers, other processes on the GPU (an inference "
    "engine's gpu_memory_utilization) and the CUDA context; lower their share",
    Verdict.ACTIVATIONS: "use activation checkpointing on the largest modules "
    "(rankscope.profile_memory_usage shows which) or a smaller micro-batch",
    Verdict.HOST_EXHAUSTED: "lower per-worker host memory (data loader workers, pinned "
    "buffers, CPU offload) or give the actors more memory; check for a host leak",
    Verdict.TENSORS_FILL_DEVICE: "shard the model or optimizer state (FSDP/ZeRO), use mixed "
    "precision, or offload the optimizer",
    Verdict.DEVICE_HIGH: "little room left for a peak: see the fragmentation and outside-PyTorch "
    "numbers",
    Verdict.HOST_HIGH: "the node is close to Ray's memory monitor threshold (0.95 by default)",
}


@dataclass(frozen=True)
class MemoryThresholds:
    """When a number becomes a finding; every field is a fraction or a byte count.

    Example: `MemoryThresholds(device_alert=0.9)`.
    """

    device_alert: float = 0.85
    """Device used / total above this is an alert."""
    host_alert: float = 0.90
    """Node used / total above this is an alert."""
    fragmentation_fraction: float = 0.25
    """Reserved-but-unallocated / reserved above this (and above `fragmentation_min`)."""
    fragmentation_min: int = GIB
    outside_fraction: float = 0.20
    """Device used outside PyTorch / device total above this (and above `outside_min`)."""
    outside_min: int = GIB
    host_exhausted_fraction: float = 0.05
    """Node available / total below this at an OOM: host memory ran out."""

    def __post_init__(self) -> None:
        for name in (
            "device_alert",
            "host_alert",
            "fragmentation_fraction",
            "outside_fraction",
            "host_exhausted_fraction",
        ):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"{name} must be a fraction in (0, 1], got {value}")


@dataclass(frozen=True)
class LeakThresholds:
    """The leak test's knobs.

    Example: `LeakThresholds(warmup=10, min_growth_bytes=64 * 2**20)`.
    """

    warmup: int = 5
    """Snapshots skipped at the start (allocator caches and lazy initialisation grow there)."""
    min_points: int = 8
    """Fewer snapshots after the warm-up: no verdict."""
    min_tau: float = 0.6
    """Kendall's tau (pairs going up minus pairs going down, over all pairs) to call a trend."""
    min_growth_bytes: int = 4 * MIB
    """Growth over the window below this is noise."""
    min_growth_fraction: float = 0.005
    """... and so is growth below this fraction of the metric's level."""

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.min_points < 3:
            raise ValueError(
                f"warmup ({self.warmup}) must be >= 0 and min_points ({self.min_points}) >= 3"
            )
        if not 0.0 < self.min_tau <= 1.0:
            raise ValueError(f"min_tau must be in (0, 1], got {self.min_tau}")


@dataclass(frozen=True)
class LeakFinding:
    """The leak test's result for one metric of one process."""

    metric: str
    leak: bool
    reason: str
    """Why it is or is not a leak, in one line."""
    points: int
    per_step: float = 0.0
    """Growth in bytes per step (per snapshot when no step was given)."""
    per_second: float = 0.0
    tau: float = 0.0
    floor_rise: float = 0.0
    """How much the lowest value of the last quarter exceeds the lowest of the first quarter."""
    since_step: float | None = None
    """Start of the window the verdict is about (after the warm-up, or where growth began)."""
    level: float = 0.0
    capacity_left: float | None = None
    """Bytes left where this metric grows (node available, or device free)."""
    seconds_to_full: float | None = None

    @property
    def title(self) -> str:
        return METRICS[self.metric].title if self.metric in METRICS else self.metric


@dataclass(frozen=True)
class Finding:
    verdict: Verdict
    message: str
    """The numbers behind the verdict, in one line."""

    @property
    def advice(self) -> str:
        return ADVICE[self.verdict]


@dataclass(frozen=True)
class LeakReport:
    """`MemoryProfiler.leak_report()`: every metric's leak test and the suspects."""

    label: str
    snapshots: int
    findings: tuple[LeakFinding, ...]
    suspects: tuple[AllocationSite, ...] = ()
    """Fastest-growing allocation sites since the warm-up (tracemalloc), largest first."""

    @property
    def leaks(self) -> tuple[LeakFinding, ...]:
        return tuple(f for f in self.findings if f.leak)

    @property
    def leak_detected(self) -> bool:
        return bool(self.leaks)

    def summary(self) -> str:
        if not self.leaks:
            tested = ", ".join(f"{f.metric}: {f.reason}" for f in self.findings) or "no data"
            return f"{self.label}: no leak ({tested})"
        parts = [describe_leak(f) for f in self.leaks]
        if self.suspects:
            top = self.suspects[0]
            parts.append(f"top suspect {top.location} (+{human_bytes(top.size_diff)})")
        return f"{self.label}: " + "; ".join(parts)


# ------------------------------------------------------------------ trend test
def theil_sen(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(slope, intercept): the median of all pairwise slopes, robust to outliers."""
    import numpy as np

    x = np.asarray(xs, dtype=np.float64)
    y = np.asarray(ys, dtype=np.float64)
    i, j = np.triu_indices(len(x), k=1)
    dx = x[j] - x[i]
    keep = dx != 0
    if not keep.any():
        return 0.0, float(np.median(y)) if len(y) else 0.0
    slope = float(np.median((y[j] - y[i])[keep] / dx[keep]))
    return slope, float(np.median(y - slope * x))


def kendall_tau(xs: Sequence[float], ys: Sequence[float]) -> float:
    """(concordant - discordant) / pairs with distinct x: 1.0 for a series that only grows."""
    import numpy as np

    x = np.asarray(xs, dtype=np.float64)
    y = np.asarray(ys, dtype=np.float64)
    i, j = np.triu_indices(len(x), k=1)
    sx = np.sign(x[j] - x[i])
    pairs = int(np.count_nonzero(sx))
    if pairs == 0:
        return 0.0
    return float(np.sum(sx * np.sign(y[j] - y[i])) / pairs)


def thin(items: Sequence[MemorySnapshot], limit: int) -> list[MemorySnapshot]:
    """At most `limit` items evenly spread, always keeping the first and the last."""
    import numpy as np

    n = len(items)
    if n <= limit:
        return list(items)
    idx = np.unique(np.linspace(0, n - 1, limit).round().astype(int))
    return [items[k] for k in idx]


def detect_leak(
    metric: str,
    snapshots: Sequence[MemorySnapshot],
    thresholds: LeakThresholds | None = None,
) -> LeakFinding:
    """Is `metric` leaking in these snapshots (oldest first)? See `LeakThresholds`."""
    th = thresholds or LeakThresholds()
    usable = [s for s in snapshots[th.warmup :] if metric in s.metrics()]
    if len(usable) < th.min_points:
        return LeakFinding(
            metric, False, f"{len(usable)} snapshots after warm-up, need {th.min_points}", 0
        )
    usable = thin(usable, MAX_TREND_POINTS)
    windows = [usable]
    half = usable[len(usable) // 2 :]
    if len(half) >= th.min_points:
        windows.append(half)  # a leak that started late shows a steeper slope here
    results = [_test_window(metric, w, th) for w in windows]
    chosen = 0
    if len(results) == 2 and results[1].leak:
        whole, recent = results
        if not whole.leak or recent.per_step > LATE_START_RATIO * whole.per_step:
            chosen = 1
    found = results[chosen]
    if not found.leak:
        return found
    return replace(found, since_step=_onset(metric, usable, windows[chosen], found))


def _onset(
    metric: str, usable: Sequence[MemorySnapshot], window: Sequence[MemorySnapshot], f: LeakFinding
) -> float | None:
    """Where the leak began: the first snapshot after the warm-up when those already sit on the
    leak's line, else where the line, followed back, meets their level (a leak that began late).
    """
    import numpy as np

    if f.per_step <= 0 or any(s.step is None for s in usable):
        return f.since_step
    xs = np.array([float(s.step or 0) for s in window])
    ys = np.array([s.metrics()[metric] for s in window])
    slope, intercept = f.per_step, theil_sen(xs.tolist(), ys.tolist())[1]
    noise = float(np.median(np.abs(ys - (slope * xs + intercept))))
    head = usable[: max(3, len(usable) // 10)]
    hx = np.array([float(s.step or 0) for s in head])
    hy = np.array([s.metrics()[metric] for s in head])
    above = float(np.median(hy - (slope * hx + intercept)))
    first = float(usable[0].step or 0)
    if above <= max(2 * slope, 3 * noise):
        return first
    onset = (float(np.median(hy)) - intercept) / slope
    return float(min(max(onset, first), xs[-1]))


def _test_window(metric: str, window: Sequence[MemorySnapshot], th: LeakThresholds) -> LeakFinding:
    import numpy as np

    xs = [float(s.step) for s in window if s.step is not None]
    if len(xs) < len(window) or len(set(xs)) < 3:  # no steps, or steps that never moved
        xs = [float(k) for k in range(len(window))]
    ts = [s.time for s in window]
    ys = [s.metrics()[metric] for s in window]
    slope, _ = theil_sen(xs, ys)
    per_second, _ = theil_sen(ts, ys)
    tau = kendall_tau(xs, ys)
    level = float(np.median(ys))
    growth = slope * (max(xs) - min(xs))
    floor_rise, floors_rising, expected_rise = _floors(xs, ys, slope)
    capacity = _capacity_left(metric, window[-1])
    to_full = capacity / per_second if capacity is not None and per_second > 0 else None
    base = LeakFinding(
        metric,
        False,
        "",
        len(window),
        per_step=slope,
        per_second=per_second,
        tau=tau,
        floor_rise=floor_rise,
        since_step=min(xs),
        level=level,
        capacity_left=capacity,
    )
    floor_needed = max(th.min_growth_bytes, th.min_growth_fraction * level)
    if slope <= 0 or growth < floor_needed:
        grew = human_bytes(max(growth, 0.0))
        return replace(base, reason=f"grew {grew} over the window (< {human_bytes(floor_needed)})")
    rising = floors_rising and floor_rise >= 0.5 * expected_rise
    if tau < th.min_tau and not rising:
        floor = human_bytes(max(floor_rise, 0.0))
        return replace(base, reason=f"returns to its baseline (tau {tau:.2f}, floor +{floor})")
    reason = f"grows {human_bytes(slope)}/step (tau {tau:.2f}, floor +{human_bytes(floor_rise)})"
    return replace(base, leak=True, reason=reason, seconds_to_full=to_full)


def _floors(xs: Sequence[float], ys: Sequence[float], slope: float) -> tuple[float, bool, float]:
    """Lowest value of each quarter: (last - first, never falling, what the slope predicts)."""
    import numpy as np

    n = len(ys)
    cuts = [round(k * n / 4) for k in range(5)]
    quarters = [(xs[a:b], ys[a:b]) for a, b in itertools.pairwise(cuts) if b > a]
    mins = [min(q[1]) for q in quarters]
    centers = [float(np.mean(q[0])) for q in quarters]
    expected = slope * (centers[-1] - centers[0])
    tolerance = 0.1 * abs(expected)
    rising = all(b >= a - tolerance for a, b in itertools.pairwise(mins))
    return mins[-1] - mins[0], rising, expected


def _capacity_left(metric: str, snap: MemorySnapshot) -> float | None:
    kind = METRICS[metric].capacity if metric in METRICS else "node"
    if kind == "device":
        if snap.cuda is None:
            return None
        extra = snap.cuda.cached_free if metric == "cuda_allocated" else 0
        return float(snap.cuda.device_free + extra)
    return float(snap.node_available)


def detect_leaks(
    snapshots: Sequence[MemorySnapshot],
    thresholds: LeakThresholds | None = None,
    metrics: Sequence[str] = LEAK_METRICS,
) -> tuple[LeakFinding, ...]:
    """The leak test on every metric these snapshots carry."""
    present = set(snapshots[-1].metrics()) if snapshots else set()
    return tuple(detect_leak(m, snapshots, thresholds) for m in metrics if m in present)


def describe_leak(f: LeakFinding) -> str:
    text = f"{f.title} leaks {human_bytes(f.per_step)}/step"
    if f.per_second > 0:
        text += f" ({human_bytes(f.per_second)}/s)"
    if f.since_step is not None:
        text += f" since step {f.since_step:g}"
    if f.seconds_to_full is not None and f.capacity_left is not None:
        text += f"; {human_bytes(f.capacity_left)} left: full in {human_seconds(f.seconds_to_full)}"
    return text


# ------------------------------------------------------- snapshot verdicts
def snapshot_findings(
    snap: MemorySnapshot, thresholds: MemoryThresholds | None = None
) -> tuple[Finding, ...]:
    """Fragmentation, memory outside PyTorch and usage alerts, from one snapshot."""
    th = thresholds or MemoryThresholds()
    found: list[Finding] = []
    if snap.node_total > 0 and snap.node_used / snap.node_total > th.host_alert:
        found.append(
            Finding(
                Verdict.HOST_HIGH,
                f"node RAM {_pct(snap.node_used, snap.node_total)} used "
                f"({human_bytes(snap.node_available)} available)",
            )
        )
    if snap.cuda is not None:
        found.extend(cuda_findings(snap.cuda, th))
    return tuple(found)


def cuda_findings(c: CudaMemory, th: MemoryThresholds) -> list[Finding]:
    found: list[Finding] = []
    if c.device_total > 0 and c.device_used / c.device_total > th.device_alert:
        found.append(
            Finding(
                Verdict.DEVICE_HIGH,
                f"GPU {c.device}: {_pct(c.device_used, c.device_total)} used "
                f"({human_bytes(c.device_used)} of {human_bytes(c.device_total)})",
            )
        )
    if c.reserved > 0 and c.cached_free >= max(
        th.fragmentation_fraction * c.reserved, th.fragmentation_min
    ):
        found.append(
            Finding(
                Verdict.FRAGMENTATION,
                f"GPU {c.device}: reserved {human_bytes(c.reserved)} but allocated "
                f"{human_bytes(c.allocated)}: {human_bytes(c.cached_free)} cached "
                f"({human_bytes(c.inactive_split)} in split blocks), "
                f"{c.num_alloc_retries} allocation retries",
            )
        )
    if c.device_total > 0 and c.outside_pytorch >= max(
        th.outside_fraction * c.device_total, th.outside_min
    ):
        found.append(
            Finding(
                Verdict.OUTSIDE_PYTORCH,
                f"GPU {c.device}: the driver shows {human_bytes(c.device_used)} used, PyTorch "
                f"reserved {human_bytes(c.reserved)}: {human_bytes(c.outside_pytorch)} "
                "held outside PyTorch",
            )
        )
    return found


# ---------------------------------------------------------------- OOMs
@dataclass(frozen=True)
class CudaOomMessage:
    """The numbers torch puts in a CUDA out-of-memory message (None where absent)."""

    requested: int | None = None
    total: int | None = None
    free: int | None = None
    process_in_use: int | None = None
    """This process, including memory outside PyTorch."""
    allocated: int | None = None
    reserved_unallocated: int | None = None
    other_processes: int = 0
    """Memory in use by other processes the message names."""


_SIZE = r"([\d.]+) (bytes|KiB|MiB|GiB|TiB)"
_UNITS = {"bytes": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}
_OOM_PATTERNS = {
    "requested": rf"Tried to allocate {_SIZE}",
    "total": rf"total capacity of {_SIZE}|{_SIZE} total capacity",
    "free": rf"of which {_SIZE} is free|{_SIZE} free",
    "process_in_use": rf"this process has {_SIZE} memory in use",
    "allocated": rf"{_SIZE} is allocated by PyTorch|{_SIZE} already allocated",
    "reserved_unallocated": rf"{_SIZE} is reserved by PyTorch but unallocated",
}
_OLD_RESERVED = rf"{_SIZE} reserved in total by PyTorch"
_OTHER_PROCESS = rf"Process \d+ has {_SIZE} memory in use"


def _size(groups: Sequence[str | None]) -> int | None:
    values = [g for g in groups if g is not None]
    if len(values) < 2:
        return None
    return int(float(values[0]) * _UNITS[values[1]])


def parse_cuda_oom(message: str) -> CudaOomMessage | None:
    """The numbers of torch's `CUDA out of memory` message (torch 1.x and 2.x wordings)."""
    if "out of memory" not in message:
        return None
    values: dict[str, int | None] = {}
    for name, pattern in _OOM_PATTERNS.items():
        m = re.search(pattern, message)
        values[name] = _size(m.groups()) if m else None
    if values["reserved_unallocated"] is None and values["allocated"] is not None:
        m = re.search(_OLD_RESERVED, message)
        reserved = _size(m.groups()) if m else None
        if reserved is not None:
            values["reserved_unallocated"] = max(0, reserved - values["allocated"])
    others = sum(_size(m.groups()) or 0 for m in re.finditer(_OTHER_PROCESS, message))
    return CudaOomMessage(other_processes=others, **values)


@dataclass(frozen=True)
class OomEvidence:
    """What `oom_guard` saw when the error came."""

    error_type: str
    message: str
    snapshot: MemorySnapshot | None
    phase: str | None = None
    """`forward` or `backward` when the traceback went through one, else None."""
    where: str = ""
    """The innermost user frame of the traceback, `file.py:123 in fn`."""


@dataclass(frozen=True)
class OomReport:
    """`oom_guard`'s verdicts, most likely first, and the numbers behind them."""

    error_type: str
    where: str
    phase: str | None
    findings: tuple[Finding, ...]
    parsed: CudaOomMessage | None
    snapshot: MemorySnapshot | None
    time: float = 0.0
    label: str = ""
    path: str = ""
    """Where the verdict was written."""
    extra: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        head = f"rankscope oom_guard: {self.error_type}"
        if self.where:
            head += f" at {self.where}"
        if self.phase:
            head += f" (during {self.phase})"
        lines = [head]
        for f in self.findings:
            lines.append(f"  {f.verdict.value}: {f.message}; {f.advice}")
        if self.path:
            lines.append(f"  verdict written to {self.path}")
        return "\n".join(lines)


def classify_oom(
    evidence: OomEvidence, thresholds: MemoryThresholds | None = None
) -> tuple[Finding, ...]:
    """Why memory ran out, most likely cause first."""
    th = thresholds or MemoryThresholds()
    found: list[Finding] = []
    snap = evidence.snapshot
    host_error = evidence.error_type == "MemoryError" or "DefaultCPUAllocator" in evidence.message
    if snap is not None and snap.node_total > 0:
        low = snap.node_available / snap.node_total < th.host_exhausted_fraction
        if host_error or low:
            found.append(
                Finding(
                    Verdict.HOST_EXHAUSTED,
                    f"node has {human_bytes(snap.node_available)} of "
                    f"{human_bytes(snap.node_total)} available; this process holds "
                    f"{human_bytes(snap.rss)} RSS",
                )
            )
    elif host_error:
        found.append(Finding(Verdict.HOST_EXHAUSTED, "host allocation failed"))
    parsed = parse_cuda_oom(evidence.message) if not host_error else None
    if parsed is not None:
        found.extend(_message_findings(parsed, th))
    elif snap is not None and snap.cuda is not None:
        found.extend(
            f
            for f in cuda_findings(snap.cuda, th)
            if f.verdict in (Verdict.FRAGMENTATION, Verdict.OUTSIDE_PYTORCH)
        )
    if evidence.phase in ("forward", "backward") and not host_error:
        found.append(
            Finding(Verdict.ACTIVATIONS, f"out of memory during {evidence.phase}: activations")
        )
    if not found and not host_error:
        found.append(_tensors_fill(parsed, snap))
    return tuple(found)


def _message_findings(p: CudaOomMessage, th: MemoryThresholds) -> list[Finding]:
    found: list[Finding] = []
    requested = p.requested or 0
    unallocated = p.reserved_unallocated or 0
    allocated = p.allocated or 0
    reserved = allocated + unallocated
    if unallocated > 0 and (
        unallocated >= requested
        or unallocated >= max(th.fragmentation_fraction * reserved, th.fragmentation_min)
    ):
        found.append(
            Finding(
                Verdict.FRAGMENTATION,
                f"asked for {human_bytes(requested)} while {human_bytes(unallocated)} was "
                f"reserved by PyTorch but unallocated (allocated {human_bytes(allocated)})",
            )
        )
    if p.total and p.process_in_use is not None:
        outside = max(0, p.process_in_use - reserved) + p.other_processes
        if outside >= max(th.outside_fraction * p.total, th.outside_min):
            found.append(
                Finding(
                    Verdict.OUTSIDE_PYTORCH,
                    f"{human_bytes(outside)} of the GPU's {human_bytes(p.total)} is outside "
                    f"PyTorch's {human_bytes(reserved)} (other processes: "
                    f"{human_bytes(p.other_processes)})",
                )
            )
    return found


def _tensors_fill(parsed: CudaOomMessage | None, snap: MemorySnapshot | None) -> Finding:
    parts = []
    if parsed is not None and parsed.allocated is not None:
        parts.append(f"PyTorch tensors hold {human_bytes(parsed.allocated)}")
        if parsed.total:
            parts[-1] += f" of {human_bytes(parsed.total)}"
    if snap is not None:
        held = {
            "parameters": snap.params,
            "gradients": snap.grads,
            "optimizer state": snap.optimizer_state,
        }
        parts.extend(f"{k} {human_bytes(v)}" for k, v in held.items() if v)
    return Finding(Verdict.TENSORS_FILL_DEVICE, ", ".join(parts) or "no numbers available")


def phase_of(functions: Sequence[tuple[str, str]]) -> str | None:
    """`backward` or `forward` from a traceback's (function, filename) frames, outermost first."""
    for fn, filename in functions:
        if fn in ("backward", "_engine_run_backward") and "torch" in filename:
            return "backward"
    for fn, filename in functions:
        if fn in ("_call_impl", "_wrapped_call_impl") and "torch/nn" in filename:
            return "forward"
    for fn, _ in functions:
        if fn == "forward":
            return "forward"
    return None


# ------------------------------------------------------------ cluster view
@dataclass(frozen=True)
class RankMemory:
    """One rank's row of `rankscope memory`."""

    label: str
    rank: int | None
    node: str
    pid: int
    snapshot: MemorySnapshot | None
    leaks: tuple[LeakFinding, ...] = ()
    """From the rank's MemoryProfiler, when it runs one."""
    error: str = ""
    """Why there is no snapshot (no answer, dead process)."""
    findings: tuple[Finding, ...] = ()
    host_used_fraction: float | None = field(init=False)
    device_used_fraction: float | None = field(init=False)
    headroom: float | None = field(init=False)
    """The smaller free fraction of the node's RAM and of the device."""

    def __post_init__(self) -> None:
        s = self.snapshot
        host = s.node_used / s.node_total if s is not None and s.node_total else None
        device = None
        if s is not None and s.cuda is not None and s.cuda.device_total:
            device = s.cuda.device_used / s.cuda.device_total
        used = [u for u in (host, device) if u is not None]
        object.__setattr__(self, "host_used_fraction", host)
        object.__setattr__(self, "device_used_fraction", device)
        object.__setattr__(self, "headroom", 1.0 - max(used) if used else None)


@dataclass(frozen=True)
class ClusterMemory:
    job_id: str
    ranks: tuple[RankMemory, ...]
    """Least headroom first; ranks without a snapshot last."""

    @property
    def alerts(self) -> tuple[tuple[RankMemory, Finding], ...]:
        return tuple((r, f) for r in self.ranks for f in r.findings)

    @property
    def leaking(self) -> tuple[RankMemory, ...]:
        return tuple(r for r in self.ranks if any(f.leak for f in r.leaks))

    @property
    def missing(self) -> tuple[RankMemory, ...]:
        return tuple(r for r in self.ranks if r.snapshot is None)

    @property
    def has_findings(self) -> bool:
        return bool(self.alerts or self.leaking or self.missing)


def cluster_view(
    job_id: str, ranks: Sequence[RankMemory], thresholds: MemoryThresholds | None = None
) -> ClusterMemory:
    """Rows with their findings, sorted by headroom (least first)."""
    rows = [
        RankMemory(
            r.label,
            r.rank,
            r.node,
            r.pid,
            r.snapshot,
            r.leaks,
            r.error,
            snapshot_findings(r.snapshot, thresholds) if r.snapshot is not None else (),
        )
        for r in ranks
    ]
    rows.sort(
        key=lambda r: (
            r.headroom is None,
            round(r.headroom or 0.0, 2),  # ranks within a percent keep their rank order
            r.rank is None,
            r.rank or 0,
        )
    )
    return ClusterMemory(job_id, tuple(rows))


# ------------------------------------------------------------------ format
def human_bytes(n: float) -> str:
    """`1.5 GiB` style; negative numbers keep their sign."""
    sign = "-" if n < 0 else ""
    value = abs(float(n))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{sign}{value:.0f} {unit}" if unit == "B" else f"{sign}{value:.1f} {unit}"
        value /= 1024
    return f"{sign}{value:.1f} TiB"  # pragma: no cover


def human_seconds(s: float) -> str:
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.0f}%"
