"""The CLI side of `rankscope alerts`: the run directory's alert events through the hub, and
the silence rule over the hub's registry (the one rule that needs every rank at once)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from rankscope.alerts.analysis import SilenceRow, alerts_from_events, silent_ranks
from rankscope.alerts.model import Alert, AlertSettings
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeState, ProbeStatus

__all__ = ["JobAlerts", "collect_alerts", "job_alerts", "silence_rows"]

EVENT_LIMIT = 2000


@dataclass(frozen=True)
class JobAlerts:
    job_id: str
    alerts: tuple[Alert, ...]
    """Newest first."""

    @property
    def active(self) -> int:
        return sum(a.active for a in self.alerts)


def collect_alerts(address: str | None, job: str | None) -> list[JobAlerts]:
    client = HubClient.attach(address)
    settings = AlertSettings.from_env()
    now = time.time()
    results = []
    for job_id, probes in client.jobs(job).items():
        results.append(JobAlerts(job_id, tuple(job_alerts(client, job_id, probes, settings, now))))
    return results


def job_alerts(
    client: HubClient,
    job_id: str,
    probes: list[ProbeStatus],
    settings: AlertSettings | None = None,
    now: float | None = None,
) -> list[Alert]:
    """One job's alerts, newest first: its alert events and the silence rule over its ranks."""
    settings = settings or AlertSettings.from_env()
    now = time.time() if now is None else now
    events = client.events(job_id, ["alert"], EVENT_LIMIT)
    found = alerts_from_events(events, now, settings.active_for_s, job_id)
    raised = {(a.group, a.rank) for a in found if a.rule == "silent_rank" and a.active}
    found += [  # the group's judge (its rank 0's probe) may have raised them already
        a
        for a in silent_ranks(silence_rows(probes), now, settings.silent_after_s, job_id)
        if (a.group, a.rank) not in raised
    ]
    found.sort(key=lambda a: -a.time)
    return found


def silence_rows(probes: list[ProbeStatus]) -> list[SilenceRow]:
    """Ranked processes with their last step or log record, whichever came later."""
    rows = []
    for p in probes:
        if p.context.rank is None:
            continue
        last_log = 0.0
        logs = p.summaries.get("logs")
        if isinstance(logs, dict):
            times = [t.get("last_time", 0.0) for t in logs.get("templates") or ()]
            last_log = max((float(t) for t in times), default=0.0)
        rows.append(
            SilenceRow(
                rank=p.context.rank,
                group=p.context.group,
                alive=p.state == ProbeState.ALIVE,
                step=p.progress.step,
                last_activity=max(p.progress.last_progress, last_log),
                pid=p.context.pid,
            )
        )
    return rows
