"""`rankscope report`'s text as the user reads it, on a 100-column terminal: the verdict and one
line per section, from synthetic run data (no Ray) read at a fixed clock."""

from __future__ import annotations

from pathlib import Path

from helpers.golden import assert_golden, render_text
from helpers.probes import NOW
from rankscope.report.analysis import build_report
from rankscope.report.model import RunData
from rankscope.report.render import render_summary

GOLDEN = Path(__file__).parent / "golden"
HANG = (
    "group 0 (4 ranks): ranks 0-2 wait in all_reduce #7 (float32[4]) for 9.0 s; "
    "rank 3 never entered #7, its last completed collective is #6; "
    "rank 3 is in load_batch train.py:41"
)


def _process(rank: int, state: str = "alive") -> dict:
    """A registry row as `status --json` writes it."""
    context = {"rank": rank, "pid": 1000 + rank, "hostname": "host-0", "node_ip": "10.0.0.1",
               "group": "10.0.0.1:29500", "actor_class": "Worker"}  # fmt: skip
    return {
        "info": {"probe_id": f"p{1000 + rank}", "context": context},
        "state": state,
        "last_seen": NOW - 5,
        "progress": {"step": 7},
    }


def _event(kind: str, payload: dict, t: float = NOW - 30) -> dict:
    return {"kind": kind, "time": t, "payload": payload, "probe_id": "p1000"}


def test_a_hung_jobs_report_reads_as_the_golden_text():
    data = RunData(
        "01000000",
        "/runs/01000000",
        events=(
            _event("hang_report", {"path": "/runs/01000000/h.json", "findings": [HANG]}),
            _event("log.error", {"message": "CUDA error: an illegal memory access"}, NOW - 20),
        ),
        processes=tuple(_process(r) for r in range(4)),
        hang=({"findings": [{"kind": "hang", "message": HANG}], "groups": []},),
    )
    text = render_text(render_summary(build_report(data, NOW), "/runs/01000000/report.html"))
    assert_golden(text, GOLDEN / "report_hung.txt")


def test_a_healthy_jobs_report_reads_as_the_golden_text():
    data = RunData("01000000", "the hub", processes=tuple(_process(r) for r in range(4)))
    text = render_text(render_summary(build_report(data, NOW), None))
    assert_golden(text, GOLDEN / "report_healthy.txt")
