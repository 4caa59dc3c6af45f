"""`--fault pending-actor`: while the job trains, the driver starts an actor no node can host.

What a user hits when a config asks `num_cpus=8` per actor on 4-CPU nodes: the actor stays
PENDING_CREATION forever, with no error; a `ray.get` on it just waits. `rankscope why-pending`
names the actor, the resource and by how much the largest node falls short. The demo's cluster
runs without Ray's dashboard, so this is also why-pending reading the GCS's tables.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rankscope.demo.model import Fault
from rankscope.demo.session import DemoSession

if TYPE_CHECKING:
    from rankscope.resources.model import PendingReport, PendingVerdict

ACTOR_CLASS = "Evaluator"
CPU_FACTOR = 2
"""The actor asks this many times the CPUs of the largest node (never fits, whatever the
machine)."""


class Evaluator:
    """The actor a user adds beside the trainers (an evaluation loop) that asks too much."""

    def evaluate(self) -> float:
        return 0.0


def diagnose(session: DemoSession) -> bool:
    import ray

    from rankscope.resources.collect import cluster_nodes
    from rankscope.resources.model import Verdict

    session.wait_for(
        lambda: any(p.progress.step >= session.fault_step for p in session.ranked_probes()),
        what=f"training to reach step {session.fault_step}",
    )
    largest = max(n.total.get("CPU", 0.0) for n in cluster_nodes() if n.alive)
    asks = int(largest) * CPU_FACTOR
    evaluator_cls: Any = ray.remote(Evaluator)
    # ended after the job's report, which shows it pending (it holds nothing: never placed)
    session.others.append(evaluator_cls.options(num_cpus=asks).remote())
    session.console.print(
        f"the driver started an {ACTOR_CLASS} actor asking {asks} CPUs (the largest node has "
        f"{largest:g}); it never starts. `rankscope why-pending`:\n"
    )
    verdict = _why_pending_of_the_actor(session)
    return (
        verdict is not None
        and verdict.verdict == Verdict.INFEASIBLE
        and any(s.resource == "CPU" for s in verdict.shortfalls)
    )


def the_actor(report: PendingReport, job_id: str) -> PendingVerdict | None:
    """The verdict on this job's Evaluator in `report`, or None when it is not there."""
    for v in report.verdicts:
        d = v.demand
        if d.job_id == job_id and d.name.rsplit(".", 1)[-1] == ACTOR_CLASS:
            return v
    return None


def _why_pending_of_the_actor(session: DemoSession) -> PendingVerdict | None:
    """Run why-pending (as the CLI does) until it lists the actor (the GCS registers it
    asynchronously), print its answer, and return the actor's verdict."""
    from rankscope.resources.collect import pending_report
    from rankscope.resources.render import render_pending

    deadline = time.time() + 30.0
    while True:
        report = pending_report(None)
        verdict = the_actor(report, session.job_id)
        if verdict is not None or time.time() > deadline:
            session.console.print(render_pending(report))
            return verdict
        time.sleep(0.25)


FAULT = Fault(
    "pending-actor",
    "the driver starts an actor that asks more CPUs than any node has",
    diagnose,
    command="rankscope why-pending",
)
