"""The ranks' whole-run step series from the run directory, for a report after the job ended.

Each rank's monitor writes `steps-<who>.json` (`monitor.io_history`: at most 128 points, one per
`stride` steps, with the tokens of each interval). Read back, they become the report's series
(the same shape as the live ones) and the monitor's findings over them, so the loss, tokens/s
and grad-norm charts and the training-health verdicts outlive the job.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from typing import Any

from rankscope.monitor.io_history import COLUMNS
from rankscope.runtime.run_dir import STEPS_PREFIX
from rankscope.serialize import parse_json

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
            with open(os.path.join(job_dir, name), "rb") as f:
                doc = parse_json(f.read())
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
    from the live series: past 64 ranks the per-rank detectors read the odd ranks only), and the
    coarsest stride (1: every step kept)."""
    from rankscope.monitor.model import NonFinite, RankSeries, StepSample
    from rankscope.report.trends import SCREENED, _table, findings_over, odd_ones

    kept, stride = [], 1
    for doc in docs:
        try:  # a damaged file costs its rank's series, never the page
            columns = doc.get("columns") or []
            rows = doc.get("rows") or []
            if columns != list(COLUMNS):  # another writer's order: put ours back
                at = [columns.index(c) for c in COLUMNS]
                rows = [[row[i] for i in at] for row in rows]
            table = _table(rows)
            samples = tuple(itertools.starmap(StepSample, rows))  # the file's columns, in order
            bad = doc.get("first_nonfinite")
            rank = doc.get("rank")
            series = RankSeries(
                -1 if rank is None else int(rank),
                str(doc.get("group") or ""),
                str(doc.get("node") or ""),
                "",
                samples,
                first_nonfinite=NonFinite(**bad) if isinstance(bad, dict) else None,
            )
            stride = max(stride, int(doc.get("stride") or 1))
        except (TypeError, ValueError, AttributeError):
            continue
        kept.append((series, rows, table))
    kept.sort(key=lambda k: (k[0].group, k[0].rank))
    whole = odd_ones([t for _, _, t in kept]) if len(kept) > 2 * SCREENED else None
    analysed = [s for s, _, _ in kept]
    data = tuple({"rank": s.rank, "group": s.group, "samples": rows} for s, rows, _ in kept)
    return data, findings_over(analysed, whole), stride
