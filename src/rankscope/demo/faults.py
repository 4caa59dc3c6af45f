"""The demo's faults: what each injects into a rank, and how the driver diagnoses it.

Each fault lives in its own module (`fault_<name>.py`) and is listed here once. A fault's
`inject` runs inside the faulty rank at the start of every step from `fault_step` on; its
`diagnose` runs on the driver while the job trains and returns True when rankscope found
what was injected (the demo's exit code).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rankscope.demo.session import DemoSession


@dataclass(frozen=True)
class Fault:
    name: str
    description: str
    diagnose: Callable[[DemoSession], bool]
    inject: Callable[[Any, int], None] | None = None
    """Called as inject(worker, step) in the faulty rank; None for faults built into train.py."""
    command: str = ""
    """What finds it, as a user would run it (`rankscope hang`): `--fault all` shows it."""
    at_step: int = 5
    """The step the fault starts at (a shorter run: its last step). A loss spike needs 10
    steps of history before it for the detector's window."""
    min_steps: int = 3
    """Fewer steps than this: the run cannot show the fault (`--steps` is refused)."""


def _registry() -> dict[str, Fault]:
    from rankscope.demo import fault_hang, fault_none, fault_stall

    faults = [fault_none.FAULT, fault_stall.FAULT, fault_hang.FAULT]
    from rankscope.demo import fault_leak

    faults.append(fault_leak.FAULT)
    from rankscope.demo import fault_breakpoint

    faults.append(fault_breakpoint.FAULT)
    from rankscope.demo import fault_desync

    faults.append(fault_desync.FAULT)
    from rankscope.demo import fault_straggler

    faults.append(fault_straggler.FAULT)
    from rankscope.demo import fault_nan

    faults.append(fault_nan.FAULT)
    from rankscope.demo import fault_loss_spike

    faults.append(fault_loss_spike.FAULT)
    from rankscope.demo import fault_error_burst

    faults.append(fault_error_burst.FAULT)
    from rankscope.demo import fault_dead_rank

    faults.append(fault_dead_rank.FAULT)
    from rankscope.demo import fault_pending_actor

    faults.append(fault_pending_actor.FAULT)
    return {f.name: f for f in faults}


def fault_names() -> tuple[str, ...]:
    return tuple(_registry())


def get_fault(name: str) -> Fault:
    return _registry()[name]
