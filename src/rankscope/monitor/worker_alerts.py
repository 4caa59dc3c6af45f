"""The worker side of the monitor's alerts: findings raised through the alerts feature.

Every rank raises its own findings (the first non-finite, loss spikes, divergence) from its
heartbeat summary (`raise_local`); the group's rank 0 (the lowest live rank while it is dead)
also judges its group every few seconds (`judge_group`: one hub call for the group's heartbeat
summaries, then stragglers, loss disagreement and the alerts feature's silent-rank rule, which
one rank cannot see alone). Both go through `alerts.worker.publish`: an `alert` event in the run
directory (so `rankscope alerts` and `rankscope status` list them) and a POST to the configured
webhook. Runs on the probe thread; never raises.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

from rankscope.alerts.model import AlertSettings
from rankscope.alerts.worker import publish
from rankscope.alerts.worker_judge import FALLBACK_RANKS, HubReader, judges_group
from rankscope.context import get_context
from rankscope.monitor.alert_rules import (
    AlertGate,
    Persistence,
    alerted,
    finding_alerts,
    group_findings,
)
from rankscope.monitor.model import Finding, Thresholds

__all__ = ["judge_group", "raise_local"]

_gates: dict[str, AlertGate] = {}
_persistence = Persistence()
_hub = HubReader()
"""The hub read a turn (at most `JUDGE_TIMEOUT_S`, on the probe thread, never the training's)."""


def _settings() -> AlertSettings:
    try:
        return AlertSettings.from_env()
    except Exception:  # a bad RANKSCOPE_ALERT_* value: the alerts feature reports it
        return AlertSettings()


def _gate(name: str) -> AlertGate:
    gate = _gates.get(name)
    if gate is None:
        gate = _gates[name] = AlertGate(_settings().cooldown_s)
    return gate


def _raise(gate: AlertGate, findings: Sequence[Finding]) -> None:
    kept = [f for f in findings if alerted(f)]
    now = time.time()
    alerts = finding_alerts(kept, now, get_context().job_id or "")
    new, resolved = gate.update(alerts, now, [f.step for f in kept])
    if new or resolved:
        publish(new, resolved)


def raise_local(findings: Sequence[Finding]) -> None:
    """This rank's own findings (already over its recent steps) as alerts."""
    with contextlib.suppress(Exception):
        _raise(_gate("local"), findings)


def judge_group(thresholds: Thresholds | None = None) -> None:
    """On the group's rank 0 (or, while it is dead, the lowest live of ranks 1-3:
    `alerts.worker_judge.judges_group`): stragglers and loss disagreement over the group's
    summaries."""
    ctx = get_context()
    if ctx.rank is None or ctx.rank >= FALLBACK_RANKS:
        return
    try:
        from rankscope.monitor.view import inputs_of

        # ranks 1-3 first ask only who is alive (no summaries), the judge then reads them all
        lean: list[str] | None = None if ctx.rank == 0 else []
        probes = _hub.list_probes(ctx.job_id, lean)
        if probes and lean is not None and judges_group(ctx.rank, ctx.group, probes):
            probes = _hub.list_probes(ctx.job_id)
        if probes is None:
            return
        group = ctx.group or ""
        mine = [p for p in probes if (p.context.group or "") == group]
        if not judges_group(ctx.rank, ctx.group, mine):
            return
        now = time.time()
        found = group_findings(inputs_of(mine), thresholds or Thresholds(), now)
        _raise(_gate("group"), _persistence.held(found, now))
        _raise_silent(mine, ctx.job_id or "")
    except Exception:
        pass


def _raise_silent(probes: Sequence[Any], job_id: str) -> None:
    """Ranks of the group with no step and no log while the others go on: raised here, so the
    run directory and the webhook hear of them while nobody runs `rankscope alerts`."""
    from rankscope.alerts.analysis import silence_rows, silent_ranks

    now = time.time()
    silent = silent_ranks(silence_rows(list(probes)), now, _settings().silent_after_s, job_id)
    new, resolved = _gate("silence").update(silent, now)
    if new or resolved:
        publish(new, resolved)
