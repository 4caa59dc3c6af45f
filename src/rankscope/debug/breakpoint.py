"""`conditional_breakpoint`: stop only where, when and on the ranks you choose.

Off unless RANKSCOPE_DEBUG=1 (or RANKSCOPE_LEVEL=full) is in the process's environment or
`enable_full_debugging()` was called; then a disabled call costs one global lookup.
"""

from __future__ import annotations

import enum
import logging
import os
import sys
from collections.abc import Callable

from rankscope.debug.analysis import RankFilter, rank_matches
from rankscope.debug.sync import wait_if_paused

log = logging.getLogger("rankscope")

BACKENDS = ("pdb", "debugpy")


class _Default(enum.Enum):
    TIMEOUT = "default"


DEFAULT_TIMEOUT = _Default.TIMEOUT


def _env_enabled() -> bool:
    flag = os.environ.get("RANKSCOPE_DEBUG", "").strip().lower()
    return flag in ("1", "true", "yes", "on") or os.environ.get("RANKSCOPE_LEVEL") == "full"


_enabled = _env_enabled()


def default_timeout() -> float | None:
    """RANKSCOPE_DEBUG_TIMEOUT seconds (600 when unset; `none` waits forever)."""
    raw = os.environ.get("RANKSCOPE_DEBUG_TIMEOUT", "600").strip().lower()
    if raw in ("none", "inf", ""):
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        log.warning("rankscope: RANKSCOPE_DEBUG_TIMEOUT=%r is not seconds; using 600", raw)
        return 600.0


def enable_full_debugging() -> None:
    """Debug level `full` in this process: conditional breakpoints stop.

    Example: `rankscope.enable_full_debugging()` at the top of a worker's `__init__`.
    """
    global _enabled
    _enabled = True


def enable_lightweight_monitoring() -> None:
    """Debug level `light` in this process: the probe only; conditional breakpoints do nothing."""
    global _enabled
    _enabled = False


def debugging_enabled() -> bool:
    return _enabled


def conditional_breakpoint(
    condition: bool | Callable[[], bool] = True,
    rank_filter: RankFilter = None,
    *,
    name: str | None = None,
    backend: str = "pdb",
    timeout: float | _Default | None = DEFAULT_TIMEOUT,
    sync: bool = False,
) -> None:
    """Pause here in a debug session when debugging is on, `condition` holds and this rank
    passes `rank_filter`; `rankscope debug list` shows the session, `debug attach` connects.

    Example: `rankscope.conditional_breakpoint(lambda: loss.isnan(), rank_filter=0, timeout=60)`.
    """
    if not _enabled:
        return
    wait_if_paused()
    try:
        if not _should_stop(condition, rank_filter, backend):
            return
        wait_s = default_timeout() if timeout is DEFAULT_TIMEOUT else timeout
        frame = sys._getframe(1)
    except Exception as exc:  # a broken condition must not stop the job
        log.warning("rankscope: conditional_breakpoint skipped: %s: %s", type(exc).__name__, exc)
        return
    from rankscope.debug.server import open_breakpoint

    open_breakpoint(frame, name=name, backend=backend, timeout=wait_s, sync=sync)


def _should_stop(
    condition: bool | Callable[[], bool], rank_filter: RankFilter, backend: str
) -> bool:
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: choose one of {', '.join(BACKENDS)}")
    from rankscope.context import get_context

    if rank_filter is not None and not rank_matches(get_context().rank, rank_filter):
        return False
    return bool(condition() if callable(condition) else condition)
