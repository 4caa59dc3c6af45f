"""One way to ask the ranks (pure part): a fan-out's replies sorted into answers, failures,
silence and the dead, and the selection that refuses a bad rank spec before Ray."""

from __future__ import annotations

import dataclasses
import time

import pytest

from rankscope.context import RankContext
from rankscope.errors import UserError
from rankscope.runtime.ask import UNEXPECTED, Command, Selection, sort_answers
from rankscope.runtime.protocol import (
    CommandResult,
    FanOutResult,
    ProbeInfo,
    ProbeState,
    ProbeStatus,
    Progress,
)


def _probe(rank: int, state: ProbeState = ProbeState.ALIVE) -> ProbeStatus:
    ctx = RankContext(
        rank, rank, 4, "node", "10.0.0.1", "host", 1000 + rank, "01000000", None, "Worker",
        None, "explicit",
    )  # fmt: skip
    now = time.time()
    info = ProbeInfo(f"p{rank}", ctx, "0", now)
    return ProbeStatus(info, state, now, now, Progress(1, now), 0, 0)


LIVE = [_probe(r) for r in range(4)]
DEAD = (_probe(9, ProbeState.DEAD),)


def test_replies_are_sorted_into_answers_failures_silence_and_the_dead():
    result = FanOutResult(
        (
            CommandResult("p0", True, payload=1.5),
            CommandResult("p1", False, error="KeyError: 'x'"),
            CommandResult("p2", True, payload="not a float"),
        ),
        (LIVE[3],),
    )
    answers = sort_answers(Command("monitor", expect=float), LIVE, DEAD, result, 2.0)
    assert answers.payloads() == {"p0": 1.5}
    assert [(p.info.probe_id, why) for p, why in answers.failed] == [
        ("p1", "KeyError: 'x'"),
        ("p2", UNEXPECTED),
    ]
    assert [p.info.probe_id for p in answers.silent] == ["p3"]
    assert answers.dead == DEAD
    assert [
        (p.info.probe_id, why)
        for p, why in answers.unanswered("probe failed: {error}", "no answer within {deadline}s")
    ] == [
        ("p1", "probe failed: KeyError: 'x'"),
        ("p2", f"probe failed: {UNEXPECTED}"),
        ("p3", "no answer within 2s"),
    ]


def test_any_payload_is_an_answer_when_the_command_expects_no_type():
    result = FanOutResult((CommandResult("p0", True, payload=None),), ())
    answers = sort_answers(Command("level"), LIVE[:1], (), result, None)
    assert answers.payloads() == {"p0": None} and not answers.failed


def test_a_reply_from_a_probe_not_asked_is_ignored():
    result = FanOutResult((CommandResult("elsewhere", True, payload=1),), ())
    assert not sort_answers(Command("stacks"), LIVE, (), result, 2.0).answered


def test_a_bad_rank_spec_fails_as_the_selection_is_made():
    assert Selection(ranks="0-2,7").wanted == frozenset({0, 1, 2, 7})
    assert Selection().wanted is None
    with pytest.raises(UserError):
        Selection(ranks="two")
    with pytest.raises(dataclasses.FrozenInstanceError):
        Selection().job = "x"  # type: ignore[misc]


CHECKS = ("debug/cli_diagnose.py", "memory/cli_diagnose.py")
"""The checks `rankscope diagnose` dispatches: as thin as a `cli.py`."""


def test_no_cli_nor_diagnose_check_joins_a_cluster_or_builds_a_hub_client():
    """A `cli.py` parses, calls its collect, renders and exits: the collect side attaches."""
    import ast
    import pathlib

    import rankscope

    src = pathlib.Path(rankscope.__file__).parent
    modules = [*src.rglob("cli.py"), *(src / c for c in CHECKS)]
    reaching = []
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == "rankscope.runtime.client":
                reaching.append(f"{path.relative_to(src)}:{node.lineno}")
    assert len(modules) >= 20 and reaching == []
