"""The CLI side of `rankscope alerts`: the run directory's alert events through the hub, and
the silence rule over the hub's registry (the one rule that needs every rank at once)."""

from __future__ import annotations

import time

from rankscope.alerts.analysis import (
    ACK_ALL,
    acks_from_events,
    alerts_from_events,
    apply_acks,
    silence_rows,
    silent_ranks,
)
from rankscope.alerts.model import Alert, AlertSettings, JobAlerts
from rankscope.errors import UserError
from rankscope.runtime import deadlines
from rankscope.runtime.ask import Command, Selection, ask_one, select
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeState, ProbeStatus

__all__ = ["collect_alerts", "job_alerts"]

EVENT_LIMIT = 2000


def collect_alerts(
    address: str | None, selection: Selection, *, ack: str | None = None
) -> list[JobAlerts]:
    """Each job's alerts; with `ack` (a rule name, or `all`), that rule's alerts (every
    alert's) raised so far are acknowledged first: an `alert_ack` event in the run directory,
    written by a live probe of the job."""
    client = HubClient.attach(address)
    settings = AlertSettings.from_env()
    now = time.time()
    jobs = select(client, selection)
    found = {
        job_id: job_alerts(client, job_id, probes, settings, now) for job_id, probes in jobs.items()
    }
    if ack is not None:
        rule = ACK_ALL if ack == "all" else ack
        names = sorted({a.rule for alerts in found.values() for a in alerts})
        if rule != ACK_ALL and rule not in names:
            raise UserError(f"no alert named {ack!r} (the alerts: {', '.join(names) or 'none'})")
        for job_id, alerts in found.items():  # only where it has active alerts to acknowledge
            if any(a.active and rule in (ACK_ALL, a.rule) for a in alerts):
                found[job_id] = _acknowledge(client, job_id, jobs[job_id], alerts, rule)
    return [JobAlerts(job_id, tuple(alerts)) for job_id, alerts in found.items()]


def _acknowledge(
    client: HubClient, job_id: str, probes: list[ProbeStatus], found: list[Alert], rule: str
) -> list[Alert]:
    live = sorted(
        (p for p in probes if p.state == ProbeState.ALIVE),
        key=lambda p: (p.context.rank is None, p.context.rank or 0),
    )
    for p in live[:3]:  # the first that answers writes the event
        acked = ask_one(client, [p], Command("alerts_ack", {"rule": rule}), deadlines.HUB_DEFAULT)
        if acked.answered:
            return apply_acks(found, {rule: float(acked.answered[0][1].payload)})
    raise UserError(f"job {job_id}: no live process to record the acknowledgement")


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
    events = client.events(job_id, ["alert"], EVENT_LIMIT)  # alert, alert_resolved, alert_ack
    found = alerts_from_events(events, now, settings.active_for_s, job_id)
    raised = {(a.group, a.rank) for a in found if a.rule == "silent_rank" and (a.active or a.acked)}
    found += apply_acks(  # the group's judge (its rank 0's probe) may have raised them already
        [
            a
            for a in silent_ranks(silence_rows(probes), now, settings.silent_after_s, job_id)
            if (a.group, a.rank) not in raised
        ],
        acks_from_events(events),
    )
    found.sort(key=lambda a: -a.time)
    return found
