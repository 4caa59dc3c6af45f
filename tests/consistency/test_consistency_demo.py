"""`rankscope demo --fault desync`: the drifting rank and tensor are found, as a user runs it."""

from __future__ import annotations

from helpers.cluster import run_demo


def test_demo_desync_names_the_drifting_rank_and_tensor():
    result = run_demo("--fault", "desync", "--steps", "8")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    summary = next(line for line in lines if line.startswith("replicas_after_training:"))
    assert summary.startswith(
        "replicas_after_training: 1 of 4 tensors differ; rank 3 is the outlier; "
        "worst 0.weight max|d|="
    )
    row = next(line for line in lines if line.strip().startswith("0.weight"))
    assert row.split()[:4] == ["0.weight", "mismatch", "0", "3"]
    assert "demo done (found it)" in result.stdout
