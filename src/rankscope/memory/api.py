"""The memory feature's public Python API: what a user calls in a worker.

`MemoryProfiler` (snapshots over time, the leak test, a report), `profile_memory_usage` (peak
memory per phase and per module) and `oom_guard` (on an out-of-memory error, say why). The code
behind them runs in the worker: `worker_profiler.py`, `worker_usage.py`, `worker_oom.py`.
"""

from rankscope.memory.worker_oom import oom_guard
from rankscope.memory.worker_profiler import MemoryProfiler
from rankscope.memory.worker_usage import MemoryUsageProfile, profile_memory_usage

__all__ = ["MemoryProfiler", "MemoryUsageProfile", "oom_guard", "profile_memory_usage"]
