"""`conditional_breakpoint`: stop only where, when and on the ranks you choose.

Off unless the process's debug level is `full` (`rankscope.level`, its one owner: RANKSCOPE_DEBUG=1,
RANKSCOPE_LEVEL=full, `enable_full_debugging()` or `rankscope level full` on a live rank); a
disabled call costs one module attribute lookup. Sampling applies as to the other full-level
features: with `configure(sample_every=N)` (RANKSCOPE_SAMPLE_EVERY, `rankscope level
--sample-every N`) a breakpoint stops only on every Nth `rankscope.step()` (its condition is
not even evaluated on the others), like `debug_decorator`'s capture. Another rank's `sync=True`
pause is still waited for on every call.
"""

from __future__ import annotations

import enum
import logging
import os
import sys
from collections.abc import Callable

from rankscope import level as _level
from rankscope.debug.analysis import RankFilter, rank_matches
from rankscope.debug.worker_sync import wait_if_paused
from rankscope.runtime.probe import progress

log = logging.getLogger("rankscope")

BACKENDS = ("pdb", "debugpy")


class _Default(enum.Enum):
    TIMEOUT = "default"


DEFAULT_TIMEOUT = _Default.TIMEOUT


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


enable_full_debugging = _level.enable_full_debugging
enable_lightweight_monitoring = _level.enable_lightweight_monitoring


def debugging_enabled() -> bool:
    return _level.FULL


def conditional_breakpoint(
    condition: bool | Callable[[], bool] = True,
    rank_filter: RankFilter = None,
    *,
    name: str | None = None,
    backend: str = "pdb",
    timeout: float | _Default | None = DEFAULT_TIMEOUT,
    sync: bool = False,
) -> None:
    """Pause here in a debug session when debugging is on, this step is sampled, `condition`
    holds and this rank passes `rank_filter`; `rankscope debug list` shows the session,
    `debug attach` connects.

    Example: `rankscope.conditional_breakpoint(lambda: loss.isnan(), rank_filter=0, timeout=60)`.
    """
    if not _level.FULL:
        return
    wait_if_paused()
    if not _level.full_at(progress.step):  # not a sampled step: `condition` is not evaluated
        return
    try:
        if not _should_stop(condition, rank_filter, backend):
            return
        wait_s = default_timeout() if timeout is DEFAULT_TIMEOUT else timeout
        frame = sys._getframe(1)
    except Exception as exc:  # a broken condition must not stop the job
        log.warning("rankscope: conditional_breakpoint skipped: %s: %s", type(exc).__name__, exc)
        return
    if backend == "debugpy":
        from rankscope.debug.worker_debugpy import debugpy_breakpoint

        debugpy_breakpoint(frame, name=name, timeout=wait_s, sync=sync)
        return
    from rankscope.debug.worker_server import open_breakpoint

    open_breakpoint(frame, name=name, timeout=wait_s, sync=sync)


def _should_stop(
    condition: bool | Callable[[], bool], rank_filter: RankFilter, backend: str
) -> bool:
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: choose one of {', '.join(BACKENDS)}")
    from rankscope.context import get_context

    if rank_filter is not None and not rank_matches(get_context().rank, rank_filter):
        return False
    return bool(condition() if callable(condition) else condition)
