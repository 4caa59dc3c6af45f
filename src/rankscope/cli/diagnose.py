"""`rankscope diagnose`: cluster self-checks, each owned by the feature it checks.

    rankscope diagnose                        environment of every registered process
    rankscope diagnose --mode memory_profile  memory snapshot of every rank (rankscope.memory)
    rankscope diagnose --check-debug-ports    debug sessions' ports (rankscope.debug)

Each check is a function `(address, job, as_json, console) -> exit code` in its feature package,
imported only when asked for.
"""

from __future__ import annotations

import importlib
from typing import Protocol

from rich.console import Console

from rankscope.errors import UserError

MODES = {
    "memory_profile": "rankscope.memory.diagnose:memory_profile",
}
DEBUG_PORTS_CHECK = "rankscope.debug.ports:check_debug_ports"
ENVIRONMENT_CHECK = "rankscope.cli.environment:check_environment"


class Check(Protocol):
    def __call__(
        self, address: str | None, job: str | None, as_json: bool, console: Console
    ) -> int: ...


def run(
    *,
    address: str | None,
    job: str | None,
    mode: str | None,
    check_debug_ports: bool,
    as_json: bool,
    console: Console,
) -> int:
    if mode is not None and mode not in MODES:
        raise UserError(f"--mode {mode!r}: choose one of {', '.join(sorted(MODES))}")
    if check_debug_ports:
        target = DEBUG_PORTS_CHECK
    elif mode is not None:
        target = MODES[mode]
    else:
        target = ENVIRONMENT_CHECK
    return _load(target)(address, job, as_json, console)


def _load(target: str) -> Check:
    module, _, name = target.partition(":")
    check: Check = getattr(importlib.import_module(module), name)
    return check
