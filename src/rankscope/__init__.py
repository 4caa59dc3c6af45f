"""rankscope: find what is wrong in distributed training on Ray.

Start the probe with `rankscope.init()` in each worker (or, with no code change,
`runtime_env={"worker_process_setup_hook": "rankscope.setup_worker"}`), then ask the cluster
from a terminal: `rankscope status`, `rankscope stacks`.
"""

import rankscope.doctor  # registers the probe's `environment` command
import rankscope.failures  # records the exception that ends a task, a train loop or a thread
import rankscope.hang  # collective recorder, watchdog, `collectives` command
import rankscope.levels  # registers the probe's `level` command
import rankscope.memory  # registers the probe's `memory` command
import rankscope.monitor  # the step series, the `monitor` command and summary
import rankscope.stacks  # registers the probe's `stacks` command
import rankscope.trace  # the probe's `trace` command, step markers, clock offsets
from rankscope._version import __version__
from rankscope.alerts import alert_on, configure_alerts
from rankscope.consistency import (
    ConsistencyReport,
    inspect_distributed_tensor,
    verify_distributed_tensors,
)
from rankscope.context import RankContext, get_context
from rankscope.debug import (
    conditional_breakpoint,
    enable_full_debugging,
    enable_lightweight_monitoring,
    post_mortem,
)
from rankscope.hang import record_collectives
from rankscope.level import configure
from rankscope.logs import DistributedLogger, capture_logging
from rankscope.memory import MemoryProfiler, MemorySnapshot, oom_guard, profile_memory_usage
from rankscope.monitor import StepMonitor, watch_nan
from rankscope.resources import SmartResourceAllocator
from rankscope.runtime.api import current_probe, init, setup_worker, shutdown, step
from rankscope.trace import debug_decorator, enable_detailed_tracing, span

__all__ = [
    "ConsistencyReport",
    "DistributedLogger",
    "MemoryProfiler",
    "MemorySnapshot",
    "RankContext",
    "SmartResourceAllocator",
    "StepMonitor",
    "__version__",
    "alert_on",
    "capture_logging",
    "conditional_breakpoint",
    "configure",
    "configure_alerts",
    "current_probe",
    "debug_decorator",
    "enable_detailed_tracing",
    "enable_full_debugging",
    "enable_lightweight_monitoring",
    "get_context",
    "init",
    "inspect_distributed_tensor",
    "oom_guard",
    "post_mortem",
    "profile_memory_usage",
    "record_collectives",
    "setup_worker",
    "shutdown",
    "span",
    "step",
    "verify_distributed_tensors",
    "watch_nan",
]
