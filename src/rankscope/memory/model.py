"""Memory records shared by the profiler, the probe handler, the analysis and the reports.

Plain dataclasses with no imports from the rest of rankscope, so the pure analysis can read them
and Ray can pickle them between a rank's probe and the CLI. All sizes are bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3
MIB = 1024**2


@dataclass(frozen=True)
class CudaMemory:
    """One CUDA device as PyTorch's caching allocator and the driver see it."""

    device: int
    allocated: int
    """Bytes held by live tensors."""
    reserved: int
    """Bytes the caching allocator holds from the driver (allocated + cached)."""
    active: int
    inactive_split: int
    """Cached bytes in blocks split by earlier allocations: the fragmentation that OOMs."""
    peak_allocated: int
    peak_reserved: int
    num_alloc_retries: int
    """cudaMalloc retries after freeing the cache: a sign of memory pressure."""
    num_ooms: int
    device_used: int
    """What the driver (nvidia-smi) shows as used, including memory outside PyTorch."""
    device_total: int

    @property
    def cached_free(self) -> int:
        """Reserved by PyTorch but not holding tensors."""
        return max(0, self.reserved - self.allocated)

    @property
    def outside_pytorch(self) -> int:
        """Used on the device but not reserved by this process's PyTorch (NCCL, CUDA context,
        other processes such as an inference engine)."""
        return max(0, self.device_used - self.reserved)

    @property
    def device_free(self) -> int:
        return max(0, self.device_total - self.device_used)


@dataclass(frozen=True)
class MemorySnapshot:
    """One process's memory at one moment; `MemoryProfiler.take_snapshot()` makes them.

    Example: `snap = profiler.take_snapshot(step=i); snap.rss / 2**20`.
    """

    time: float
    pid: int
    rss: int
    """Resident set size of the process."""
    anon: int
    """Resident anonymous memory (RSS minus file-backed and shared pages)."""
    node_total: int
    node_available: int
    """What the kernel could give out without swapping (MemAvailable)."""
    step: int | None = None
    tag: str | None = None
    uss: int | None = None
    """Unique set size (private pages); costly to read, so measured at most once a second."""
    cuda: CudaMemory | None = None
    params: int | None = None
    grads: int | None = None
    optimizer_state: int | None = None
    tracemalloc_current: int | None = None
    """Bytes Python objects hold as tracemalloc counts them (with track_allocations)."""
    leak_detected: bool = False
    """Taken by a MemoryProfiler with leak_detection: whether its history shows a leak by now
    (`if snapshot.leak_detected: profiler.generate_report(...)`, as the guides write it)."""

    @property
    def node_used(self) -> int:
        return max(0, self.node_total - self.node_available)

    def metrics(self) -> dict[str, float]:
        """Every measured number by metric name (see `METRICS`), leaving out what is absent."""
        out: dict[str, float] = {"rss": self.rss, "anon": self.anon, "node_used": self.node_used}
        optional = {
            "uss": self.uss,
            "params": self.params,
            "grads": self.grads,
            "optimizer_state": self.optimizer_state,
            "tracemalloc": self.tracemalloc_current,
        }
        out.update({k: v for k, v in optional.items() if v is not None})
        if self.cuda is not None:
            c = self.cuda
            out.update(
                cuda_allocated=c.allocated,
                cuda_reserved=c.reserved,
                cuda_active=c.active,
                cuda_inactive_split=c.inactive_split,
                device_used=c.device_used,
            )
        return out


@dataclass(frozen=True)
class Metric:
    name: str
    title: str
    capacity: str
    """What fills up when this metric grows: `node` or `device`."""


METRICS = {
    m.name: m
    for m in (
        Metric("rss", "process RSS", "node"),
        Metric("anon", "process anonymous RSS", "node"),
        Metric("uss", "process USS", "node"),
        Metric("node_used", "node used", "node"),
        Metric("tracemalloc", "Python objects (tracemalloc)", "node"),
        Metric("cuda_allocated", "CUDA allocated", "device"),
        Metric("cuda_reserved", "CUDA reserved", "device"),
        Metric("cuda_active", "CUDA active", "device"),
        Metric("cuda_inactive_split", "CUDA inactive split", "device"),
        Metric("device_used", "device used (driver)", "device"),
        Metric("params", "parameters", "device"),
        Metric("grads", "gradients", "device"),
        Metric("optimizer_state", "optimizer state", "device"),
    )
}
"""Every metric a snapshot can carry, in the order reports show them."""

LEAK_METRICS = ("rss", "tracemalloc", "cuda_allocated", "cuda_reserved", "device_used")
"""Metrics the leak test runs on: the process on the host, its Python objects when tracemalloc
traces them (a long-lived process can leak into freed heap pages, so RSS stays flat), tensors,
the cache, the driver."""


@dataclass(frozen=True)
class AllocationSite:
    """One place in the code whose allocations grew (tracemalloc) between two moments."""

    location: str
    """`path/to/file.py:123`."""
    size_diff: int
    count_diff: int
    size: int
    line: str = ""
    """The source line, when it can be read."""


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
class RankMemoryReply:
    """What one rank's probe answers to `memory`."""

    snapshot: MemorySnapshot
    has_profiler: bool = False
    history: tuple[MemorySnapshot, ...] = ()
    """When asked with history=True: the profiler's snapshots (thinned), or without one the
    heartbeat trend of host memory (`handler.TREND_POINTS`)."""
    leaks: tuple[LeakFinding, ...] = ()
    suspects: tuple[AllocationSite, ...] = ()
    thinned: int = 0


@dataclass(frozen=True)
class GpuDevice:
    """One physical GPU as `nvidia-smi` (NVML) sees it; sizes in bytes."""

    index: int
    """The physical index on its node (what Ray's GPU ids and CUDA_VISIBLE_DEVICES name)."""
    uuid: str
    total: int
    used: int


@dataclass(frozen=True)
class GpuTenancy:
    """What one process's probe answers to `gpus`: which GPUs it holds, and how much of them."""

    ray_gpu_ids: tuple[str, ...]
    """Ray's GPU ids for this worker (`get_accelerator_ids()["GPU"]`): physical indices."""
    ray_gpus: float
    """The GPU amount Ray assigned to this worker (0.5 for `num_gpus=0.5`)."""
    cuda_visible_devices: str | None
    devices: tuple[GpuDevice, ...] = ()
    """The node's GPUs, when nvidia-smi answers (no NVML: empty)."""
    process_used: tuple[tuple[str, int], ...] = ()
    """(device uuid, bytes) this pid holds per device, as NVML counts it."""
    torch_reserved: int | None = None
    """PyTorch's reserved bytes, when this process already initialised CUDA."""
    torch_device_total: int | None = None
    error: str = ""
