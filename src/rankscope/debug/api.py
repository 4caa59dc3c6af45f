"""The debug feature's public Python API: what a user calls in a worker.

`conditional_breakpoint(rank=..., condition=...)` stops only where, when and on the ranks you
choose; `post_mortem()` opens a session at the raising frame of an uncaught exception; the
debug level (`enable_full_debugging()`, `enable_lightweight_monitoring()`) decides whether
either opens at all. The code behind them runs in the worker (`worker_breakpoint.py`,
`worker_postmortem.py`, the session server `worker_server.py`).
"""

from rankscope.debug.worker_breakpoint import conditional_breakpoint, debugging_enabled
from rankscope.debug.worker_postmortem import post_mortem
from rankscope.level import enable_full_debugging, enable_lightweight_monitoring

__all__ = [
    "conditional_breakpoint",
    "debugging_enabled",
    "enable_full_debugging",
    "enable_lightweight_monitoring",
    "post_mortem",
]
