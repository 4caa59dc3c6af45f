"""The worker side of alerts: each rank evaluates its own rules on its probe thread.

The user sets them through `api.py` (`alert_on`, `configure_alerts`).

The records the logs summary drains (`logs.worker_summary.on_records`) feed the ERROR-burst,
new-error-template and user regex rules; every `check_interval_s` the host memory (and the
device memory when torch has initialized CUDA) is compared with the thresholds. An alert is an
`alert` event sent with the next heartbeat to the run directory (`alert_resolved` when a memory
rule stops holding) and, when a webhook is configured, POSTed from a daemon thread. Evaluating
where the records are keeps the hub free of per-record work and needs no import of this
package by runtime/; the cross-rank silence rule runs where the registry is read
(`alerts.collect`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from rankscope import level as _level
from rankscope.alerts.analysis import ACK_ALL, ACK_EVENT, MemoryReading, RankRules
from rankscope.alerts.io_webhook import WebhookSender
from rankscope.alerts.model import Alert, AlertSettings
from rankscope.alerts.worker_judge import run_job_judge
from rankscope.context import get_context
from rankscope.logs import worker_summary as log_summary
from rankscope.runtime.api import current_probe
from rankscope.runtime.probe import register_handler, register_summary

__all__ = ["publish", "rules_state"]

_lock = threading.Lock()
_settings: AlertSettings | None = None
_rules: RankRules | None = None
_webhook = WebhookSender()
_last_memory_check = 0.0
_raised = 0


def _state() -> RankRules:
    global _settings, _rules
    with _lock:
        if _rules is None:
            _settings = _settings or AlertSettings.from_env()
            _rules = RankRules(_settings, "?")
            _rules.set_rules(_settings.rules)
        return _rules


def rules_state() -> RankRules:
    """This process's rule state (tests and the level command read it)."""
    return _state()


def publish(alerts: Sequence[Alert], resolved: Sequence[tuple[str, int | None]] = ()) -> None:
    """Raise alerts another feature's rules found (the monitor's): events, webhook, counts.

    An alert's own `rank` and `group`, when set, name the rank it is about (a group's judge may
    raise one about another rank); else this process's. `resolved`: (rule, rank) pairs that
    stopped holding. Never raises.
    Example: `publish([Alert("straggler", "warning", "rank 3 computes 2.1x ...", now, rank=3)])`.
    """
    with contextlib.suppress(Exception):  # a probe thread calls: a failed alert is only lost
        _emit(list(alerts), [], list(resolved))


def _emit(
    alerts: list[Alert],
    resolved: list[str],
    resolved_about: Sequence[tuple[str, int | None]] = (),
) -> None:
    global _raised
    probe = current_probe()
    ctx = get_context()
    for alert in alerts:
        mine = alert.scope != "job"  # a job-scoped alert is about no one rank, not its judge's
        payload = {
            **dataclasses.asdict(alert),
            "rank": alert.rank if alert.rank is not None or not mine else ctx.rank,
            "pid": ctx.pid,
            "group": alert.group if alert.group is not None or not mine else ctx.group,
            "job_id": ctx.job_id,
        }
        _raised += 1
        if probe is not None:
            probe.emit("alert", payload)
        url = _state().settings.webhook
        if url:
            _webhook.send(url, payload)
    about = [(rule, ctx.rank) for rule in resolved] + list(resolved_about)
    for rule, rank in about:
        if probe is not None:
            probe.emit("alert_resolved", {"rule": rule, "rank": rank, "pid": ctx.pid})


def _who() -> str:
    return get_context().label


@log_summary.on_records
def _on_records(batch: list[log_summary.Drained]) -> None:
    if not _level.RECORDING:
        return
    rules = _state()
    rules.who = _who()
    records = [(d.level, d.message, d.time, d.template, d.where) for d in batch]
    _emit(rules.records(records, time.time()), [])


@register_handler("alerts_ack")
def _ack(args: dict[str, Any]) -> float:
    """`rankscope alerts --ack RULE|all` through this probe: an `alert_ack` event for the run
    directory (sent with the next heartbeat); answers the acknowledgement's time."""
    now = time.time()
    probe = current_probe()
    if probe is not None:
        probe.emit(ACK_EVENT, {"rule": str(args.get("rule") or ACK_ALL), "time": now})
    return now


@register_summary("alerts")
def _check() -> dict[str, Any] | None:
    """On every heartbeat: drain the log records (their rules run), and now and then memory."""
    global _last_memory_check
    log_summary.drain()
    rules = _state()
    now = time.time()
    if _level.RECORDING and now - _last_memory_check >= rules.settings.check_interval_s:
        _last_memory_check = now
        rules.who = _who()
        found, resolved = rules.memory(
            _read_memory(), log_summary.settings().alert_threshold, _device_threshold(), now
        )
        _emit(found, resolved)
    job_rules = None
    if _level.RECORDING and rules.has_job_rules:
        job_rules = rules.job_counts(now) or {}  # `{}`: the judge sees this rank has such rules
        ctx, probe = get_context(), current_probe()
        probe_id = probe.probe_id if probe is not None else None
        cooldown_s = rules.settings.cooldown_s
        _emit(run_job_judge(ctx.job_id or "", ctx.rank, ctx.group, cooldown_s, None, probe_id), [])
    if not _raised and not _webhook.failed and job_rules is None:
        return None
    summary: dict[str, Any] = {
        "raised": _raised,
        "webhook_sent": _webhook.sent,
        "webhook_failed": _webhook.failed,
    }
    if job_rules is not None:
        summary["job_rules"] = job_rules  # the job's judge adds them up (`alerts.worker_judge`)
    return summary


def _device_threshold() -> float:
    from rankscope.memory.analysis import MemoryThresholds

    return MemoryThresholds().device_alert


def _read_memory() -> MemoryReading:
    from rankscope.memory.worker_snapshot import host_memory

    _rss, _anon, _uss, total, available = host_memory(uss=False)
    device_used = device_total = 0
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                free, device_total = torch.cuda.mem_get_info()
                device_used = device_total - free
        except Exception:
            device_used = device_total = 0
    return MemoryReading(total - available, total, device_used, device_total)
