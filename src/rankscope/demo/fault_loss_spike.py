"""`--fault loss-spike`: one rank trains on a mislabeled batch for one step; its loss jumps.

The batch's targets are off by 1.5 (a shard whose labels were shifted), about ten times the
loss of a normal step. The shift is applied for that step as the same offset on the model's
output by a forward hook (mse(out + c, y) == mse(out, y - c), gradients included), so
train.py stays the user's code. The detector compares each loss with the median of the steps
before it, so the spike comes after 12 steps of history.
"""

from __future__ import annotations

from typing import Any

from rankscope.demo.model import Fault
from rankscope.demo.monitor_check import health, monitor_step, named
from rankscope.demo.session import DemoSession

TARGET_SHIFT = 1.5
SPIKE_STEP = 12


def inject(worker: Any, step: int) -> None:
    hook = worker.__dict__.pop("_spike_hook", None)
    if hook is not None:
        hook.remove()
    if step == worker.fault_step:
        worker._spike_hook = worker.model.register_forward_hook(
            lambda module, args, output: output + TARGET_SHIFT
        )


def diagnose(session: DemoSession) -> bool:
    from rankscope.monitor.model import FindingKind

    found = named(health(session), FindingKind.LOSS_SPIKE)
    return found == [(session.fault_rank, monitor_step(session.fault_step))]


FAULT = Fault(
    "loss-spike",
    "one rank trains on a mislabeled batch for one step",
    diagnose,
    inject,
    command="rankscope monitor",
    at_step=SPIKE_STEP,
    min_steps=SPIKE_STEP + 1,
)
