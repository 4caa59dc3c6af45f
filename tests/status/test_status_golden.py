"""`rankscope status` as the user reads it, on a 100-column terminal: a small job with a dead
and a stuck rank row by row, and a 64-rank job folded into alike rows."""

from __future__ import annotations

from pathlib import Path

from helpers.golden import assert_golden, render_text
from helpers.probes import NOW, probe_status
from rankscope.runtime.protocol import ProbeState
from rankscope.status.render import render_status

GOLDEN = Path(__file__).parent / "golden"
RAY_TRAIN = {"world_size": 64, "actor": "RayTrainWorker"}
DEATH = "Ray: worker died (SYSTEM_ERROR): exit code 1"


def test_a_small_job_with_a_dead_and_a_stuck_rank_reads_as_the_golden_text():
    probes = [
        probe_status(0, node=0),
        probe_status(1, node=0, step=90, stepped_ago=45.0),
        probe_status(2, node=1, state=ProbeState.DEAD, step=119, stepped_ago=41, seen_ago=40),
        probe_status(3, node=1, state=ProbeState.UNRESPONSIVE, step=119, seen_ago=12),
        probe_status(None, actor="TrainController", step=0),
    ]
    text = render_text(
        render_status("01000000", probes, {"p1002": DEATH}, now=NOW, first_death=f"rank 2: {DEATH}")
    )
    assert_golden(text, GOLDEN / "status_small.txt")


def test_a_64_rank_job_folds_into_alike_rows_as_the_golden_text():
    probes = [probe_status(r, **RAY_TRAIN, node=r // 8, step=120 + r % 2) for r in range(64)]
    probes[17] = probe_status(
        17, **RAY_TRAIN, node=2, state=ProbeState.DEAD, step=118, stepped_ago=41, seen_ago=40
    )
    probes[40] = probe_status(40, **RAY_TRAIN, node=5, step=90, stepped_ago=45.0)
    text = render_text(render_status("01000000", probes, {"p1017": DEATH}, now=NOW))
    assert_golden(text, GOLDEN / "status_folded.txt")
