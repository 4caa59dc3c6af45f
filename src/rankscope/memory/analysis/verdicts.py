"""Verdicts from one snapshot: usage alerts, fragmentation, memory held outside PyTorch."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from rankscope.memory.model import (
    GIB,
    CudaMemory,
    MemorySnapshot,
)
from rankscope.units import human_bytes, percent


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
class Finding:
    verdict: Verdict
    message: str
    """The numbers behind the verdict, in one line."""

    @property
    def advice(self) -> str:
        return ADVICE[self.verdict]


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
                f"node RAM {percent(snap.node_used, snap.node_total)} used "
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
                f"GPU {c.device}: {percent(c.device_used, c.device_total)} used "
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
