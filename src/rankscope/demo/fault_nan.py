"""`--fault nan`: one rank's batch holds NaN for one step; the NaN spreads through all_reduce.

From the next step every rank's loss is NaN (the averaged gradients were), so "which rank
first" is the question: the monitor keeps each rank's first non-finite value and names the
earliest. The NaN arrives through a forward pre-hook on the model for that one step, so
train.py stays the user's code.
"""

from __future__ import annotations

from typing import Any

from rankscope.demo.model import Fault
from rankscope.demo.monitor_check import health, monitor_step, named
from rankscope.demo.session import DemoSession


def inject(worker: Any, step: int) -> None:
    hook = worker.__dict__.pop("_nan_hook", None)
    if hook is not None:
        hook.remove()
    if step == worker.fault_step:
        worker._nan_hook = worker.model.register_forward_pre_hook(
            lambda module, args: (args[0] * float("nan"),)
        )


def diagnose(session: DemoSession) -> bool:
    from rankscope.monitor.model import FindingKind

    found = named(health(session), FindingKind.NON_FINITE)
    return found == [(session.fault_rank, monitor_step(session.fault_step))]


FAULT = Fault(
    "nan",
    "one rank's batch holds NaN for one step",
    diagnose,
    inject,
    command="rankscope monitor",
)
