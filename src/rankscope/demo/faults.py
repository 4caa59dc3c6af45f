"""The demo's faults, in the order `--fault all` runs them.

Each fault lives in its own module (`fault_<name>.py`, its `FAULT` a `model.Fault`) and is
listed once in `FAULTS`. A fault's `inject` runs inside the faulty rank at the start of every
step from `fault_step` on; its `diagnose` runs on the driver while the job trains and returns
True when rankscope found what was injected (the demo's exit code).
"""

from __future__ import annotations

from rankscope.demo import (
    fault_breakpoint,
    fault_dead_rank,
    fault_desync,
    fault_error_burst,
    fault_hang,
    fault_leak,
    fault_loss_spike,
    fault_nan,
    fault_none,
    fault_pending_actor,
    fault_stall,
    fault_straggler,
)
from rankscope.demo.model import Fault

FAULTS: list[Fault] = [
    fault_none.FAULT,
    fault_stall.FAULT,
    fault_hang.FAULT,
    fault_leak.FAULT,
    fault_breakpoint.FAULT,
    fault_desync.FAULT,
    fault_straggler.FAULT,
    fault_nan.FAULT,
    fault_loss_spike.FAULT,
    fault_error_burst.FAULT,
    fault_dead_rank.FAULT,
    fault_pending_actor.FAULT,
]


def fault_names() -> tuple[str, ...]:
    return tuple(f.name for f in FAULTS)


def get_fault(name: str) -> Fault:
    return {f.name: f for f in FAULTS}[name]
