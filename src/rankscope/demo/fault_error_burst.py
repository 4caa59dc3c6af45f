"""`--fault error-burst`: one rank logs a burst of ERROR records through DistributedLogger.

Its reads of a data shard keep failing; each failure is one ERROR record. The rank's probe
counts them where they are logged (10 within 60 s make a burst, RANKSCOPE_ALERT_ERROR_BURST)
and raises an `error_burst` alert, which `rankscope alerts` lists with the rank.
"""

from __future__ import annotations

from typing import Any

from rankscope.demo.model import Fault
from rankscope.demo.session import DemoSession

FAILED_READS = 12


def inject(worker: Any, step: int) -> None:
    import rankscope

    if step != worker.fault_step:
        return
    log = rankscope.DistributedLogger("demo.data")
    for shard in range(FAILED_READS):
        log.error(
            "reading shard %d of s3://demo/train-%05d.parquet failed: timed out", shard, shard
        )


def diagnose(session: DemoSession) -> bool:
    from rankscope.alerts.collect import collect_alerts
    from rankscope.alerts.model import JobAlerts
    from rankscope.alerts.render import render_alerts
    from rankscope.runtime.ask import Selection

    found: list[JobAlerts] = []

    def burst() -> bool:
        found[:] = collect_alerts(None, Selection(session.job_id))
        return any(a.rule == "error_burst" for j in found for a in j.alerts)

    session.console.print("waiting for the error-burst alert (`rankscope alerts`)...")
    session.wait_for(burst, what="the error_burst alert")
    session.console.print(render_alerts(found[0]))
    ranks = {a.rank for j in found for a in j.alerts if a.rule == "error_burst"}
    return ranks == {session.fault_rank}


FAULT = Fault(
    "error-burst",
    "one rank logs a burst of ERROR records",
    diagnose,
    inject,
    command="rankscope alerts",
)
