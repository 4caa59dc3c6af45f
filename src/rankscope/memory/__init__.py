"""Memory: per-process snapshots, leak detection, OOM forensics, a cluster view, HTML reports."""

from rankscope.memory import worker as _worker  # noqa: F401  (registers the `memory` command)
from rankscope.memory import worker_gpus as _worker_gpus  # noqa: F401  (registers the `gpus` command)
from rankscope.memory.api import MemoryProfiler, MemoryUsageProfile, oom_guard, profile_memory_usage
from rankscope.memory.model import CudaMemory, MemorySnapshot

__all__ = [
    "CudaMemory",
    "MemoryProfiler",
    "MemorySnapshot",
    "MemoryUsageProfile",
    "oom_guard",
    "profile_memory_usage",
]
