"""`--fault dead-rank`: one rank's process exits in the middle of training.

The others fail in their next all_reduce; the driver then ends them, as a trainer's controller
(Ray Train's among them) ends the group when one worker fails. Of all those deaths, the one
that matters is the first: `rankscope status` names it, with Ray's death cause.
"""

from __future__ import annotations

import os
from typing import Any

from rankscope.demo.model import Fault
from rankscope.demo.session import DemoSession

EXIT_CODE = 3


def inject(worker: Any, step: int) -> None:
    """A native crash, or a library calling exit(), as the process sees it: no exception."""
    os._exit(EXIT_CODE)


def diagnose(session: DemoSession) -> bool:
    import ray

    from rankscope.runtime.ask import Selection
    from rankscope.runtime.protocol import ProbeState
    from rankscope.status.collect import job_statuses
    from rankscope.status.render import render_status

    faulty = session.runs[session.fault_rank]
    ray.wait([faulty], timeout=None)
    session.console.print(f"rank {session.fault_rank}'s task failed; ending the other ranks...")
    for rank, actor in enumerate(session.actors):
        if rank != session.fault_rank:
            ray.kill(actor)

    def all_dead() -> bool:
        ranked = [p for p in session.client.probes(session.job_id) if p.context.rank is not None]
        return len(ranked) == session.workers and all(p.state == ProbeState.DEAD for p in ranked)

    session.console.print("waiting for the hub to see every rank dead (`rankscope status`)...")
    session.wait_for(all_dead, what="the ranks' deaths")
    [job] = job_statuses(None, Selection(session.job_id), client=session.client)
    session.console.print(
        render_status(job.job_id, list(job.processes), job.deaths, first_death=job.first_death)
    )
    return job.first_death.startswith(f"rank {session.fault_rank} died first")


FAULT = Fault(
    "dead-rank",
    "one rank's process exits mid-training",
    diagnose,
    inject,
    command="rankscope status",
)
