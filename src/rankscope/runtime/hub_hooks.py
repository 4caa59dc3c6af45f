"""What features may run in the hub when it learns a fact only it can see: a probe died.

The hub is the one process that outlives a job whose ranks all die together (a driver or a
controller tears the group down within a second of the first death), so a death is told from
here. Features register at import time (`rankscope/__init__.py` imports them, in the hub's
process too); the hub calls each hook once per probe it marks dead and writes the events the
hooks return into the job's run directory. A hook that raises costs its own events only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from rankscope.runtime.protocol import ProbeStatus

__all__ = ["DeathHook", "on_death", "register_death_hook"]

log = logging.getLogger("rankscope")

DeathHook = Callable[[ProbeStatus, Sequence[ProbeStatus]], list[tuple[str, dict[str, Any]]]]
"""`hook(dead, job)`: the probe just marked dead and every probe of its job (it included);
returns (event kind, payload) pairs for the run directory. Runs on the hub's event loop: it
must return in a millisecond or so (no Ray call, no file I/O)."""
_death_hooks: list[DeathHook] = []


def register_death_hook(fn: DeathHook) -> DeathHook:
    """Call `fn` whenever the hub marks a probe dead (its process proven gone, or its node)."""
    _death_hooks.append(fn)
    return fn


def on_death(dead: ProbeStatus, job: Sequence[ProbeStatus]) -> list[tuple[str, dict[str, Any]]]:
    """Every hook's events for this death; never raises."""
    out: list[tuple[str, dict[str, Any]]] = []
    for hook in list(_death_hooks):
        try:
            out.extend(hook(dead, job))
        except Exception as exc:  # a feature's bug costs its events, never the hub
            log.warning("rankscope hub: a death hook failed: %s: %s", type(exc).__name__, exc)
    return out
