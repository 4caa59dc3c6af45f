"""Job-scoped alert rules and who judges them, on synthetic records and registry rows (no Ray):
each rank only counts (its heartbeat summary carries its recent times), the judge adds them up
and names the ranks that contributed; the judge is the lowest live rank of the group."""

from __future__ import annotations

import pytest

from rankscope.alerts.analysis import RankRules
from rankscope.alerts.model import AlertSettings, RegexRule
from rankscope.alerts.worker_judge import (
    Cooldown,
    JobRuleRow,
    job_rule_alerts,
    job_rule_rows,
    judges_group,
    judges_job,
)
from rankscope.context import RankContext
from rankscope.errors import UserError
from rankscope.runtime.protocol import ProbeInfo, ProbeState, ProbeStatus, Progress

NOW = 1000.0


def _rank_rules(rank: int, errors: int, *, start: float = NOW - 5) -> RankRules:
    rules = RankRules(
        AlertSettings(error_burst=5, error_window_s=10.0, error_burst_scope="job"), f"rank {rank}"
    )
    batch = [
        ("ERROR", f"step {i} failed", start + i * 0.1, "step <n> failed") for i in range(errors)
    ]
    alerts = rules.records(batch, NOW)
    assert [a.rule for a in alerts] == (["new_error"] if errors else [])  # no per-rank burst
    return rules


def _row(rank: int, rules: RankRules) -> JobRuleRow:
    return JobRuleRow(f"rank {rank}", rank, rules.job_counts(NOW) or {})


def test_an_error_burst_counted_across_ranks_names_the_ranks_that_contributed():
    rows = [_row(0, _rank_rules(0, 0)), _row(1, _rank_rules(1, 3)), _row(2, _rank_rules(2, 2))]
    (alert,) = job_rule_alerts(rows, NOW, "job1")
    assert (alert.rule, alert.severity, alert.scope, alert.rank) == (
        "error_burst",
        "error",
        "job",
        None,
    )
    assert alert.message.startswith(
        "job: 5 ERROR records in 10 s from ranks 1,2 (rank 1: 3, rank 2: 2)"
    )
    assert "last: step 2 failed" in alert.message
    assert job_rule_alerts(rows[:2], NOW) == []  # rank 1 alone: 3 < 5


def test_a_rank_sends_only_its_recent_matches_and_at_most_count_of_them():
    rules = _rank_rules(1, 12)  # more than the burst on one rank: it still raises no burst
    entry = rules.job_counts(NOW)["error_burst"]
    assert (entry["n"], entry["newest"]) == (5, round(NOW - 5 + 1.1, 3))
    assert entry["before"] == pytest.approx([0.4, 0.3, 0.2, 0.1, 0.0])
    assert _rank_rules(1, 3, start=NOW - 30).job_counts(NOW) is None  # out of the 10 s window
    stale = _row(2, _rank_rules(2, 3))
    assert job_rule_alerts([stale, _row(1, _rank_rules(1, 3))], NOW + 8) == []  # the window moved


def test_a_user_regex_rule_with_job_scope_is_counted_across_ranks_only():
    def rank(r: int, lines: int) -> JobRuleRow:
        rules = RankRules(AlertSettings(), f"rank {r}")
        rules.set_rules([RegexRule("nccl", r"NCCL timeout", "critical", 4, 60.0, scope="job")])
        batch = [("WARNING", "NCCL timeout on op 7", NOW - 1, "NCCL timeout on op <n>")] * lines
        assert rules.records(batch, NOW) == []  # the rank raises nothing itself
        return _row(r, rules)

    (alert,) = job_rule_alerts([rank(0, 1), rank(3, 3)], NOW)
    assert (alert.rule, alert.severity) == ("nccl", "critical")
    assert "4 lines matching 'NCCL timeout' in 60 s from ranks 0,3 (rank 3: 3, rank 0: 1)" in (
        alert.message
    )
    with pytest.raises(UserError, match="scope 'group' is not one of rank, job"):
        RegexRule("x", "y", scope="group")
    with pytest.raises(UserError, match="scope"):
        AlertSettings(error_burst_scope="cluster")


def test_a_summary_stays_small_and_the_judges_sum_stays_exact_for_the_window():
    """count=1000 on one rank: the heartbeat carries the number of matches, the newest and the
    32 oldest (not 1,000 times, ~15 KB a rule a heartbeat); a judge reading it 0.1 s later
    counts exactly the matches still within the window, and the message is the same."""
    import json

    rules = RankRules(AlertSettings(), "rank 0")
    rules.set_rules([RegexRule("cuda", "CUDA error", "error", 1000, 10.0, scope="job")])
    batch = [
        ("INFO", "CUDA error 7", NOW - 9.995 + i * 0.01, "CUDA error <n>") for i in range(1000)
    ]
    rules.records(batch, NOW)
    summary = rules.job_counts(NOW)
    assert len(json.dumps(summary)) < 800 and summary["rule:cuda"]["n"] == 1000
    row = JobRuleRow("rank 0", 0, summary)
    (alert,) = job_rule_alerts([row], NOW, "j")
    assert alert.message.startswith("job: 1000 lines matching 'CUDA error' in 10 s from rank 0")
    other = JobRuleRow("rank 1", 1, summary)  # 10 of each left the window 0.1 s later
    (alert,) = job_rule_alerts([row, other], NOW + 0.1)
    assert "job: 1980 lines matching 'CUDA error' in 10 s from ranks 0,1" in alert.message
    assert "(rank 0: 990, rank 1: 990)" in alert.message
    assert job_rule_alerts([row], NOW + 10.1) == []  # the newest left the window too


def test_malformed_summaries_count_for_nothing():
    rows = [JobRuleRow("rank 0", 0, {"error_burst": {"times": "x"}}), JobRuleRow("rank 1", 1, {})]
    assert job_rule_alerts(rows, NOW) == []


def test_the_cooldown_raises_a_holding_rule_once_then_again_after_it_stopped():
    rows = [_row(1, _rank_rules(1, 5))]
    gate = Cooldown(60.0)
    assert len(gate.admit(job_rule_alerts(rows, NOW), NOW)) == 1
    assert gate.admit(job_rule_alerts(rows, NOW), NOW + 1) == []
    assert gate.admit([], NOW + 2) == []  # stopped holding
    (again,) = gate.admit(job_rule_alerts(rows, NOW), NOW + 3)
    assert again.count == 1


def _probe(
    rank: int | None, state: ProbeState, group: str | None = "g", alerts=None
) -> ProbeStatus:
    ctx = RankContext(
        rank, 0, 4, "n0", "10.0.0.1", "h0", 100 + (rank or 0), "job", None, "W", None, "env", group
    )
    summaries = {"alerts": alerts} if alerts is not None else {}
    return ProbeStatus(
        ProbeInfo(f"p{rank}", ctx, "0", NOW), state, NOW, NOW, Progress(1, NOW), 0, 0, summaries
    )


def test_the_judge_is_the_lowest_live_rank_of_its_group():
    alive, dead, stuck = ProbeState.ALIVE, ProbeState.DEAD, ProbeState.UNRESPONSIVE
    group = [_probe(0, alive), _probe(1, alive), _probe(2, alive)]
    assert [judges_group(r, "g", group) for r in (0, 1, 2)] == [True, False, False]
    group[0] = _probe(0, dead)
    assert [judges_group(r, "g", group) for r in (0, 1, 2)] == [False, True, False]
    group[1] = _probe(1, stuck)  # a probe that stopped heartbeating cannot judge either
    assert [judges_group(r, "g", group) for r in (0, 1, 2)] == [False, False, True]
    assert not judges_group(None, "g", group)


def test_the_job_judge_is_the_first_groups_judge_and_reads_the_alerts_summaries():
    alive = ProbeState.ALIVE
    times = {"error_burst": {"times": [NOW - 1] * 5, "count": 5, "window_s": 10.0, "what": "x"}}
    probes = [
        _probe(0, alive, "b", {"job_rules": {}}),
        _probe(0, ProbeState.DEAD, "a", {"job_rules": {}}),
        _probe(1, alive, "a", {"raised": 0, "job_rules": times}),
        _probe(0, alive, "0-other"),  # a group without job-scoped rules never judges them
        _probe(None, alive, None, {"job_rules": {}}),  # no rank: takes no part in choosing
    ]
    assert judges_job(1, "a", probes) and not judges_job(0, "b", probes)
    assert not judges_job(0, "0-other", probes)
    (row,) = job_rule_rows(probes)
    assert (row.who, row.rank) == ("rank 1", 1)


def test_an_acknowledged_alert_is_not_active_until_raised_again():
    from rankscope.alerts.analysis import acks_from_events, alerts_from_events

    def alert(rule: str, when: float, rank: int = 1) -> dict:
        payload = {"rule": rule, "severity": "error", "message": "m", "rank": rank}
        return {"kind": "alert", "time": when, "probe_id": f"p{rank}", "payload": payload}

    ack = {"kind": "alert_ack", "time": 20.0, "probe_id": "p0", "payload": {"rule": "burst"}}
    events = [alert("burst", 10.0), alert("oom", 12.0, 2), ack, alert("burst", 30.0, 3)]
    assert acks_from_events(events) == {"burst": 20.0}
    found = {(a.rule, a.rank): (a.active, a.acked) for a in alerts_from_events(events, 40.0, 300.0)}
    assert found == {
        ("burst", 1): (False, True),  # raised before the ack
        ("oom", 2): (True, False),  # another rule
        ("burst", 3): (True, False),  # raised after it
    }
    every = [*events, {"kind": "alert_ack", "time": 35.0, "payload": {"rule": "*"}}]
    assert not any(a.active for a in alerts_from_events(every, 40.0, 300.0))


def test_without_ranks_the_lowest_probe_id_with_job_rules_judges():
    """verl actors without RANK: no ranked process has job-scoped rules, so the live one with
    them and the lowest probe id judges (the others read the hub less often), deterministically;
    a ranked process with such rules takes the judging back."""
    from dataclasses import replace

    from rankscope.alerts.worker_judge import _Judge

    alive = ProbeState.ALIVE
    probes = [
        _probe(None, alive, None, {"job_rules": {}}),
        _probe(None, alive, None, {"job_rules": {}}),
        _probe(None, ProbeState.DEAD, None, {"job_rules": {}}),
        _probe(None, alive, None),  # no job-scoped rules: never judges
    ]
    probes = [
        replace(p, info=replace(p.info, probe_id=i))
        for p, i in zip(probes, ("p-b", "p-c", "p-a", "p-0"), strict=True)
    ]
    assert [judges_job(None, None, probes, i) for i in ("p-0", "p-a", "p-b", "p-c")] == [
        False,
        False,
        True,
        False,
    ]
    assert not judges_job(None, None, probes)  # no probe id: cannot tell it is the one
    ranked = [*probes, _probe(2, alive, "g", {"job_rules": {}})]
    assert not judges_job(None, None, ranked, "p-b") and judges_job(2, "g", ranked)
    judge = _Judge()
    assert judge.due(None, NOW) and not judge.due(7, NOW)
    judge.at = NOW
    assert not judge.due(None, NOW + 20) and judge.due(0, NOW + 20)
    judge.judging = True
    assert judge.due(None, NOW + 20)
