"""`rankscope demo`: the main job, run as a user runs it (its own embedded Ray cluster)."""

from __future__ import annotations

import pytest

from helpers import run_demo


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("stall", "rank 3 is elsewhere: load_batch train.py"),
        ("hang", "rank 3 never entered #"),
    ],
)
def test_demo_finds_the_injected_fault_and_exits_cleanly(fault, expected):
    result = run_demo("--fault", fault)
    out = " ".join(result.stdout.split())
    assert result.returncode == 0, result.stdout + result.stderr
    assert expected in out
    assert "demo done (found it)" in out


def test_unknown_fault_is_one_clear_line():
    result = run_demo("--fault", "meteor")
    assert result.returncode == 2
    assert result.stderr.strip().startswith("rankscope: error: --fault 'meteor': choose one of")
