"""The ranks' whole-run step series from the run directory, for a report after the job ended.

Each rank's monitor writes `steps-<who>.json` (`monitor.history`: at most 128 points, one per
`stride` steps, with the tokens of each interval). Read back, they become the report's series
(the same shape as the live ones) and the monitor's findings over them, so the loss, tokens/s
and grad-norm charts and the training-health verdicts outlive the job.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from rankscope.runtime.run_dir import STEPS_PREFIX

__all__ = ["STEPS_BYTES", "read_step_files", "series_from_docs", "step_files"]

STEPS_BYTES = 64 << 20
"""Step-series bytes read at most (4,096 ranks write about 32 MB); the rest named in a note."""
FILE_BYTES = 1 << 20
"""A larger step file is not one the monitor wrote: skipped."""


def step_files(files: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    return [(n, size) for n, size in files if n.startswith(STEPS_PREFIX) and n.endswith(".json")]


def read_step_files(
    job_dir: str, files: Iterable[tuple[str, int]]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The step documents of the job directory (newest first within the byte budget), and what
    could not be read, one line."""
    docs: list[dict[str, Any]] = []
    spent, skipped = 0, []
    for name, size in reversed(step_files(files)):
        if size > FILE_BYTES or spent + size > STEPS_BYTES:
            skipped.append(name)
            continue
        try:
            with open(os.path.join(job_dir, name), encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            skipped.append(name)
            continue
        if isinstance(doc, dict) and doc.get("kind") == "rankscope.steps":
            docs.append(doc)
            spent += size
        else:
            skipped.append(name)
    notes = (
        [f"{len(skipped)} step-series files not read (unreadable or over the budget): "
         f"{', '.join(skipped[:3])}{' ...' if len(skipped) > 3 else ''}"]
        if skipped else []
    )  # fmt: skip
    return docs, notes


def series_from_docs(
    docs: Iterable[dict[str, Any]],
) -> tuple[tuple[dict[str, Any], ...], tuple[dict[str, Any], ...], int]:
    """The report's series and the monitor's findings over them (as `trends.monitor_data` makes
    from the live series), and the coarsest stride (1: every step kept)."""
    from rankscope.monitor.model import NonFinite, RankSeries, StepSample
    from rankscope.report.trends import monitor_data

    ranks, stride = [], 1
    for doc in docs:
        columns = doc.get("columns") or []
        at = {c: columns.index(c) for c in ("step", "t", "loss", "tokens", "grad_norm")}
        samples = tuple(
            StepSample(
                int(row[at["step"]]),
                float(row[at["t"]]),
                _number(row[at["loss"]]),
                _number(row[at["tokens"]]),
                _number(row[at["grad_norm"]]),
            )
            for row in doc.get("rows") or ()
        )
        bad = doc.get("first_nonfinite")
        rank = doc.get("rank")
        ranks.append(
            RankSeries(
                rank=-1 if rank is None else int(rank),
                group=str(doc.get("group") or ""),
                node=str(doc.get("node") or ""),
                role="",
                samples=samples,
                first_nonfinite=NonFinite(**bad) if isinstance(bad, dict) else None,
            )
        )
        stride = max(stride, int(doc.get("stride") or 1))
    series, health = monitor_data(sorted(ranks, key=lambda s: (s.group, s.rank)))
    return series, health, stride


def _number(value: Any) -> float | None:
    return None if value is None else float(value)  # NaN stays: the loss went non-finite
