"""What keeps a report small at any scale: row and point bounds, folding, thinning (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rankscope.report.model import Series, Table

MAX_ROWS = 64
"""Rows per table at most: the odd ranks first, the healthy rest folded into one line."""
MAX_SERIES = 16
"""Lines per chart at most: beyond, the chart shows the min, median and max over ranks."""
MAX_POINTS = 400
"""Points per line at most (thinned evenly)."""


def process_label(ctx: Mapping[str, Any]) -> str:
    """`rank 3`, or `pid 1234@host` for a process without a rank (as `RankContext.label`)."""
    rank = ctx.get("rank")
    return f"rank {rank}" if rank is not None else f"pid {ctx.get('pid')}@{ctx.get('hostname')}"


def short_name(record: Mapping[str, Any]) -> str:
    """A pending demand's or a holder's name without its module (`train.Worker` -> `Worker`),
    or its id when it has none (an unnamed placement group)."""
    return str(record.get("name") or record.get("id") or "?").rsplit(".", 1)[-1]


def other_jobs_holders(verdict: Mapping[str, Any], job_id: str) -> list[Mapping[str, Any]]:
    """The holders of another job that a pending verdict waits for (waiting for one's own
    job's work is how a pipeline runs)."""
    return [
        h
        for h in verdict.get("holders") or ()
        if h.get("job_id") and str(h["job_id"]) != str(job_id)
    ]


def fold_rows(
    columns: tuple[str, ...],
    odd: Sequence[tuple[str, ...]],
    healthy: Sequence[tuple[str, ...]],
    what: str,
) -> Table:
    """The odd rows, then the healthy ones up to MAX_ROWS; the rest said in one line."""
    room = max(0, MAX_ROWS - len(odd))
    shown = [*odd[:MAX_ROWS], *healthy[:room]]
    folded = len(odd) + len(healthy) - len(shown)
    return Table(columns, tuple(shown), f"{folded:,} more {what} rows not shown" if folded else "")


def series(lines: Mapping[str, Sequence[tuple[float, float]]]) -> tuple[Series, ...]:
    """One line per rank, or min/median/max over ranks when there are too many."""
    if len(lines) <= MAX_SERIES:
        return tuple(Series(label, thin(points)) for label, points in lines.items())
    import numpy as np

    times = sorted({t for points in lines.values() for t, _ in points})
    grid = np.array(thin([(t, 0.0) for t in times]))[:, 0]
    values = np.array(
        [np.interp(grid, [t for t, _ in p], [v for _, v in p]) for p in lines.values() if p]
    )
    return tuple(
        Series(
            f"{name} over {len(lines)} ranks", tuple(zip(grid.tolist(), row.tolist(), strict=True))
        )
        for name, row in (
            ("min", values.min(axis=0)),
            ("median", np.median(values, axis=0)),
            ("max", values.max(axis=0)),
        )
    )


def thin(points: Sequence[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    if len(points) <= MAX_POINTS:
        return tuple(points)
    step = len(points) / MAX_POINTS
    return (*(points[int(i * step)] for i in range(MAX_POINTS - 1)), points[-1])
