"""`--fault stall`: one rank's data loading stalls; the others wait in all_reduce."""

from __future__ import annotations

import time

from rankscope.demo.model import Fault
from rankscope.demo.session import DemoSession

STALL_DETECT_S = 2.0
"""Seconds with no step on any rank before the demo looks at the stacks."""


def diagnose(session: DemoSession) -> bool:
    from rankscope.runtime.ask import Selection
    from rankscope.stacks.analysis import summarize
    from rankscope.stacks.collect import stack_reports
    from rankscope.stacks.render import render_stacks

    session.wait_for(
        lambda: all(
            time.time() - p.progress.last_progress > STALL_DETECT_S and p.progress.step > 0
            for p in session.ranked_probes()
        ),
        what="the injected stall",
    )
    session.console.print(f"no rank has made progress for {STALL_DETECT_S:g}s; taking stacks...\n")
    report = stack_reports(None, Selection(session.job_id), client=session.client)[0]
    session.console.print(render_stacks(report))
    verdict = summarize(report) or ""
    return f"rank {session.fault_rank} is elsewhere: load_batch" in verdict


# The stall itself is in train.py's load_batch, where a real data loader would hang.
FAULT = Fault(
    "stall", "one rank's data loading hangs inside a step", diagnose, command="rankscope stacks"
)
