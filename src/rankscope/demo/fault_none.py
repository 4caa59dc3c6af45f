"""`--fault none`: a healthy run; the demo trains to the end and shows the registry."""

from __future__ import annotations

import time

from rankscope.demo.model import Fault
from rankscope.demo.session import DemoSession


def diagnose(session: DemoSession) -> bool:
    import ray

    from rankscope.status.render import render_status

    losses = ray.get(session.runs)
    time.sleep(1.0)  # one more heartbeat, so the table shows the final step
    session.console.print(
        f"trained {session.steps} steps; loss {losses[0][0]:.4f} -> {losses[0][-1]:.4f}"
    )
    probes = session.ranked_probes()
    session.console.print(render_status(probes[0].context.job_id, probes))
    return True


FAULT = Fault("none", "no fault: train to the end", diagnose, command="rankscope hang")
