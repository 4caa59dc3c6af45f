"""`--fault desync`: one rank's weights silently drift away from the other replicas.

From `fault_step` on, the faulty rank nudges one weight before each step, that is right after
its previous optimizer step, as a missed or wrong weight sync would. Gradients are still
averaged, so the loss looks fine and nothing crashes; the replicas are simply no longer equal.
After training, every rank runs `verify_distributed_tensors` over its model through the gloo
group, and the report names the drifting rank and tensor.
"""

from __future__ import annotations

from typing import Any

from rankscope.demo.model import Fault
from rankscope.demo.session import DemoSession

DRIFT = 1e-4
"""Added to one weight of the faulty rank per step: small enough to go unnoticed in the loss."""
DRIFTING_TENSOR = "0.weight"


def inject(worker: Any, step: int) -> None:
    import torch

    with torch.no_grad():
        worker.model[0].weight[0, 0] += DRIFT


def diagnose(session: DemoSession) -> bool:
    import ray

    ray.get(session.runs)
    session.console.print(
        f"trained {session.steps} steps; checking that the {session.workers} replicas still "
        "hold the same parameters...\n"
    )
    reports = ray.get(
        [a.check_consistency.remote("replicas_after_training") for a in session.actors]
    )
    report = reports[0]
    session.console.print(str(report), markup=False)
    return any(
        t.name == DRIFTING_TENSOR and t.outlier_ranks == (session.fault_rank,)
        for t in report.mismatched
    )


FAULT = Fault(
    "desync",
    "one rank's weights drift from the other replicas",
    diagnose,
    inject,
    command="verify_distributed_tensors (rankscope events --kind consistency)",
)
