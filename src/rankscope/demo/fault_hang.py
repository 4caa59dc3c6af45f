"""`--fault hang`: one rank never joins the gradient all_reduce; the watchdog reports it.

The faulty rank waits for rollout weights that never come (an RL trainer's classic), so the
others block in all_reduce. With RANKSCOPE_HANG_TIMEOUT=5 (set by the demo) the watchdog writes
a cluster-wide hang report into the run directory after 5 s; the demo prints it and
`rankscope hang`'s live view.
"""

from __future__ import annotations

import glob
import json
import os
import time
from typing import Any

from rankscope.demo.model import Fault
from rankscope.demo.session import DemoSession

NEVER_S = 3600.0


def wait_for_rollout_weights(worker: Any, step: int) -> None:
    """Stands in for a queue.get() on weights from rollout workers that died or forgot us."""
    time.sleep(NEVER_S)


def diagnose(session: DemoSession) -> bool:
    from rankscope.hang.collect import hang_reports
    from rankscope.hang.render import render_hang
    from rankscope.runtime.ask import Selection

    job_id = session.ranked_probes()[0].context.job_id
    pattern = os.path.join(session.run_dir, job_id, "hang-report-*.json")
    session.console.print("waiting for the watchdog (hang_timeout 5 s)...")
    session.wait_for(lambda: bool(glob.glob(pattern)), what="the watchdog's hang report")
    [path] = glob.glob(pattern)[:1]
    with open(path, encoding="utf-8") as f:
        written = json.load(f)
    session.console.print(f"watchdog: {written['reason']}; report: {path}\n")
    [report] = hang_reports(None, Selection(job_id), min_wait_s=2.0)
    session.console.print(render_hang(report))
    culprit = f"rank {session.fault_rank} never entered"
    return any(culprit in f["message"] for f in written["report"]["findings"])


FAULT = Fault(
    "hang",
    "one rank never joins the all_reduce",
    diagnose,
    inject=wait_for_rollout_weights,
    command="rankscope hang",
)
