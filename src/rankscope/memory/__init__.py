"""Memory: per-process snapshots, leak detection, OOM forensics, a cluster view, HTML reports."""

from rankscope.memory import gpus as _gpus  # noqa: F401  (registers the `gpus` command)
from rankscope.memory import handler as _handler  # noqa: F401  (registers the `memory` command)
from rankscope.memory.model import CudaMemory, MemorySnapshot
from rankscope.memory.oom import oom_guard
from rankscope.memory.profiler import MemoryProfiler
from rankscope.memory.usage import MemoryUsageProfile, profile_memory_usage

__all__ = [
    "CudaMemory",
    "MemoryProfiler",
    "MemorySnapshot",
    "MemoryUsageProfile",
    "oom_guard",
    "profile_memory_usage",
]
