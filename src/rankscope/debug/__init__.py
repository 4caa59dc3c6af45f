"""Debug sessions in Ray workers: conditional, rank-filtered breakpoints and post-mortems.

Sessions serve pdb over TCP (127.0.0.1, one-time token) or debugpy, are listed cluster-wide by
`rankscope debug list` and joined with `rankscope debug attach ID`.
"""

from rankscope.debug import worker, worker_sync  # noqa: F401  (register the probe's debug commands)
from rankscope.debug.api import (
    conditional_breakpoint,
    debugging_enabled,
    enable_full_debugging,
    enable_lightweight_monitoring,
    post_mortem,
)
from rankscope.debug.model import DebugSession, SessionFrame
from rankscope.debug.worker_postmortem import install_from_env

install_from_env()

__all__ = [
    "DebugSession",
    "SessionFrame",
    "conditional_breakpoint",
    "debugging_enabled",
    "enable_full_debugging",
    "enable_lightweight_monitoring",
    "post_mortem",
]
