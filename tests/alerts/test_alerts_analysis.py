"""The alert rules on synthetic records, memory readings, events and registries."""

from __future__ import annotations

import pytest

from helpers.cluster import webhook_server
from helpers.workers import wait_until
from rankscope.alerts.analysis import (
    MemoryReading,
    RankRules,
    SilenceRow,
    alerts_from_events,
    silent_ranks,
)
from rankscope.alerts.io_webhook import WebhookSender
from rankscope.alerts.model import AlertSettings, RegexRule
from rankscope.errors import UserError


def _rules(**kw) -> RankRules:
    return RankRules(AlertSettings(error_burst=5, error_window_s=10.0, **kw), "rank 1")


def test_error_burst_once_per_cooldown_naming_the_rank():
    rules = _rules()
    batch = [("ERROR", f"step {i} failed", 100.0 + i * 0.1, "step <n> failed") for i in range(4)]
    alerts = rules.records(batch, 100.5)
    assert [a.rule for a in alerts] == ["new_error"]  # 4 < 5: no burst yet
    more = [("ERROR", "step 9 failed", 100.6, "step <n> failed", "train.py:148")]
    (burst,) = rules.records(more, 100.6)
    assert burst.rule == "error_burst"
    assert (
        burst.message == "rank 1: 5 ERROR records in 10 s, the last: step 9 failed (train.py:148)"
    )
    assert rules.records(more, 101.0) == []  # within the cooldown
    assert rules.records([], 200.0) == []  # the window moved on


def test_first_occurrence_of_each_error_template():
    rules = _rules()
    first = rules.records([("ERROR", "disk 3 full", 1.0, "disk <n> full")], 1.0)
    again = rules.records([("ERROR", "disk 4 full", 2.0, "disk <n> full")], 2.0)
    other = rules.records([("CRITICAL", "nccl timeout", 3.0, "nccl timeout")], 3.0)
    assert [a.rule for a in first + again + other] == ["new_error", "new_error"]
    assert "first CRITICAL of its kind: nccl timeout" in other[0].message


def test_user_regex_rule_with_count_and_window():
    rules = _rules()
    rules.set_rules([RegexRule("oom", r"CUDA out of memory", "critical", count=2, window_s=5)])
    line = ("WARNING", "CUDA out of memory. Tried", 10.0, "x")
    assert rules.records([line], 10.0) == []
    (alert,) = rules.records([("WARNING", "CUDA out of memory. Tried", 12.0, "x")], 12.0)
    assert (alert.rule, alert.severity) == ("oom", "critical")
    with pytest.raises(UserError, match="is not a regex"):
        RegexRule("bad", "(")


def test_memory_above_threshold_then_resolved():
    rules = _rules()
    high = MemoryReading(host_used=95, host_total=100, device_used=50, device_total=100)
    found, resolved = rules.memory(high, 0.9, 0.85, 1.0)
    assert [(a.rule, a.message) for a in found] == [
        ("host_memory", "rank 1: host memory 95% used, above 90%")
    ]
    found, resolved = rules.memory(MemoryReading(50, 100, 90, 100), 0.9, 0.85, 2.0)
    assert [a.rule for a in found] == ["device_memory"] and resolved == ["host_memory"]


def test_events_become_alerts_newest_first_with_active_state():
    events = [
        {
            "kind": "alert",
            "time": 10.0,
            "probe_id": "a",
            "payload": {
                "rule": "host_memory",
                "severity": "error",
                "message": "rank 1: host",
                "rank": 1,
            },
        },
        {
            "kind": "alert",
            "time": 20.0,
            "probe_id": "b",
            "payload": {
                "rule": "error_burst",
                "severity": "error",
                "message": "rank 2: burst",
                "rank": 2,
            },
        },
        {
            "kind": "alert_resolved",
            "time": 30.0,
            "probe_id": "a",
            "payload": {"rule": "host_memory"},
        },
        {"kind": "hang_report", "time": 5.0, "payload": {}},
    ]
    alerts = alerts_from_events(events, now=100.0, active_for_s=300.0)
    assert [(a.rule, a.rank, a.active) for a in alerts] == [
        ("error_burst", 2, True),
        ("host_memory", 1, False),
    ]
    assert not any(a.active for a in alerts_from_events(events, now=1000.0, active_for_s=300.0))


def test_silent_rank_only_while_its_group_continues():
    rows = [SilenceRow(r, "g", True, 50, 1000.0) for r in (0, 1, 3)]
    rows.append(SilenceRow(2, "g", True, 20, 700.0))
    (alert,) = silent_ranks(rows, now=1001.0, silent_after_s=120.0)
    assert alert.rank == 2 and "while ranks 0,1,3 continue" in alert.message
    idle = [SilenceRow(r, "g", True, 50, 100.0) for r in range(4)]
    assert silent_ranks(idle, now=1001.0, silent_after_s=120.0) == []


def test_webhook_sender_posts_json_to_a_local_server():
    with webhook_server() as (url, received):
        sender = WebhookSender()
        sender.send(url, {"rule": "error_burst", "severity": "error", "message": "rank 1: 5"})
        wait_until(lambda: received, timeout=10, what="the webhook POST")
    assert received[0]["rule"] == "error_burst"
    assert received[0]["text"] == "rankscope [error] rank 1: 5"
    assert sender.sent == 1
