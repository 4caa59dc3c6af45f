"""The report as text: the one-line summary, the table of differing tensors, one tensor's rows.

Kept apart from `analysis` so that the comparison stays pure data. The report classes in
`model` call these for `summary` and `str()` through `model.TEXT`, set at the end of this module.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from rankscope.consistency.model import (
    TEXT,
    ConsistencyReport,
    Layout,
    TensorCheck,
    TensorSpread,
    TensorStatus,
)
from rankscope.ranks import format_ranks

__all__ = ["TABLE_ROWS", "render_spread", "render_text", "summarize"]

TABLE_ROWS = 20
"""Rows of differing tensors `str(report)` shows; the rest are counted."""

_SEVERITY = {
    TensorStatus.MISSING: 5,
    TensorStatus.DTYPE_MISMATCH: 4,
    TensorStatus.SHAPE_MISMATCH: 3,
    TensorStatus.MISMATCH: 2,
    TensorStatus.CLOSE: 1,
    TensorStatus.CONSISTENT: 0,
}


# ---------------------------------------------------------------------------------- text
def summarize(report: ConsistencyReport) -> str:
    """`gradient_sync: 3 of 412 tensors differ; rank 5 is the outlier in all 3; worst ...`."""
    prefix = f"{report.operation_name}: " if report.operation_name else ""
    total = len(report.tensors)
    differing = report.differing
    parts: list[str] = []
    if not differing:
        parts.append(
            f"all {total} tensors consistent (bitwise) across {_ranks_phrase(report.ranks)}"
        )
    else:
        close = sum(1 for t in differing if t.status is TensorStatus.CLOSE)
        head = f"{len(differing)} of {total} tensors differ"
        if close == len(differing):
            head += f", all within tolerance {_sci(report.tolerance)}"
        elif close:
            head += f" ({close} within tolerance {_sci(report.tolerance)})"
        parts.append(head)
        parts.append(_outlier_phrase(report, differing))
        parts.append(_worst_phrase(report, differing))
    if report.nan_ranks:
        parts.append(_nonfinite_phrase(report, "NaN", lambda t: t.nan_ranks))
    if report.inf_ranks:
        parts.append(_nonfinite_phrase(report, "Inf", lambda t: t.inf_ranks))
    if report.missing_ranks:
        parts.append(f"{_ranks_word(report.missing_ranks)} did not take part (deadline passed)")
    return prefix + "; ".join(p for p in parts if p)


def render_text(report: ConsistencyReport) -> str:
    """The summary line, then one row per differing tensor (up to TABLE_ROWS)."""
    lines = [report.summary]
    rows = sorted(report.differing, key=_order)
    if rows:
        header = ("tensor", "status", "reference", "outliers", "max|d|", "max rel")
        table = [header] + [_row(t) for t in rows[:TABLE_ROWS]]
        widths = [max(len(r[i]) for r in table) for i in range(len(header))]
        for r in table:
            lines.append(
                "  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            )
        if len(rows) > TABLE_ROWS:
            lines.append(f"  ... and {len(rows) - TABLE_ROWS} more differing tensors")
    lines.extend(f"note: {n}" for n in report.notes)
    if report.skipped:
        shown = ", ".join(report.skipped[:5]) + (" ..." if len(report.skipped) > 5 else "")
        lines.append(f"note: {len(report.skipped)} non-tensor entries not compared: {shown}")
    return "\n".join(lines)


def _row(t: TensorCheck) -> tuple[str, ...]:
    ref = "-" if t.reference_rank is None else str(t.reference_rank)
    if not t.majority:
        ref += " (no majority)"
    if t.status in (TensorStatus.SHAPE_MISMATCH, TensorStatus.DTYPE_MISMATCH):
        attr = "shape" if t.status is TensorStatus.SHAPE_MISMATCH else "dtype"
        mine = getattr(t, attr)
        theirs = ", ".join(f"{getattr(d, attr)} on {d.rank}" for d in t.deltas)
        return (
            t.name,
            t.status.value,
            ref,
            format_ranks(t.outlier_ranks),
            f"{mine} vs {theirs}",
            "",
        )
    max_abs = "" if t.max_abs is None else _sci(t.max_abs)
    if t.estimated:
        lows = [d.lower for d in t.deltas if d.lower is not None]
        max_abs = f"{_sci(max(lows))}..{max_abs} (est.)" if lows else f"<={max_abs} (est.)"
    max_rel = "" if t.max_rel is None else _sci(t.max_rel)
    return (t.name, t.status.value, ref, format_ranks(t.outlier_ranks), max_abs, max_rel)


def _order(t: TensorCheck) -> tuple[int, float, str]:
    return (-_SEVERITY[t.status], -(t.max_abs or 0.0), t.name)


def _outlier_phrase(report: ConsistencyReport, differing: tuple[TensorCheck, ...]) -> str:
    counts = report.outlier_counts
    if not counts:
        return ""
    rank, count = next(iter(counts.items()))
    k = len(differing)
    if not any(t.majority for t in differing if rank in t.outlier_ranks):
        return f"no majority: rank {rank} differs from the lowest rank, taken as reference"
    if count == k:
        where = "" if k == 1 else f" in all {k}" if k > 2 else " in both"
        return f"rank {rank} is the outlier{where}"
    others = [r for r in counts if r != rank]
    more = f"; also {_ranks_word(others)}" if others else ""
    return f"rank {rank} is the outlier in {count} of {k}{more}"


def _worst_phrase(report: ConsistencyReport, differing: tuple[TensorCheck, ...]) -> str:
    worst = sorted(differing, key=_order)[0]
    tol = _sci(report.tolerance)
    if worst.status is TensorStatus.MISSING:
        absent = [r for r in report.ranks if r not in _holders(report, worst)]
        return f"{worst.name} is absent on {_ranks_word(absent)}"
    if worst.status in (TensorStatus.SHAPE_MISMATCH, TensorStatus.DTYPE_MISMATCH):
        what = "shape" if worst.status is TensorStatus.SHAPE_MISMATCH else "dtype"
        d = worst.deltas[0]
        return (
            f"{worst.name} has {what} {getattr(d, what)} on rank {d.rank} "
            f"but {getattr(worst, what)} on rank {worst.reference_rank}"
        )
    if worst.max_abs is None:
        return f"worst {worst.name}: difference unknown (rank details missing)"
    op = ">" if worst.status is TensorStatus.MISMATCH else "<="
    est = " (estimated upper bound)" if worst.estimated else ""
    return f"worst {worst.name} max|d|={_sci(worst.max_abs)}{est} {op} tolerance {tol}"


def _holders(report: ConsistencyReport, check: TensorCheck) -> tuple[int, ...]:
    """Ranks that have a MISSING tensor (the reference is always one of them)."""
    if check.reference_rank in check.outlier_ranks:
        return check.outlier_ranks
    return tuple(r for r in report.ranks if r not in check.outlier_ranks)


def _nonfinite_phrase(
    report: ConsistencyReport, what: str, ranks_of: Callable[[TensorCheck], tuple[int, ...]]
) -> str:
    hit = [t for t in report.tensors if ranks_of(t)]
    ranks = sorted({r for t in hit for r in ranks_of(t)})
    names = ", ".join(t.name for t in hit[:3]) + (" ..." if len(hit) > 3 else "")
    noun = "tensor" if len(hit) == 1 else "tensors"
    return f"{what} on {_ranks_word(ranks)} in {len(hit)} {noun} ({names})"


def _ranks_word(ranks: tuple[int, ...] | list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {format_ranks(ranks)}"


def _ranks_phrase(ranks: tuple[int, ...]) -> str:
    return f"{len(ranks)} ranks ({format_ranks(ranks)})" if len(ranks) != 1 else f"rank {ranks[0]}"


def _sci(x: float) -> str:
    """`2.1e-3`, `1e-6`, `0.25`, `1.5e+4` style: two significant digits, short exponents."""
    if not math.isfinite(x) or x == 0:
        return f"{x:g}"
    if 0.01 <= abs(x) < 1000:
        return f"{x:.2g}"
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa.removesuffix('.0')}e{int(exponent)}"


def render_spread(s: TensorSpread) -> str:
    layout = s.layout
    what = {
        Layout.REPLICATED: f"replicated: bitwise equal on all {len(s.rows)} ranks",
        Layout.SHARDED: f"sharded: shapes differ, {s.total_numel} elements in all",
        Layout.DIVERGENT: "same shape on every rank but different values (equal shards, or drift)",
        Layout.SINGLE: "one rank only",
    }[layout]
    lines = [f"{s.name}: {what}"]
    header = ("rank", "shape", "dtype", "device", "mean", "std", "min", "max", "norm", "nan", "inf")
    table: list[tuple[str, ...]] = [header]
    for r in s.rows:
        table.append(
            (
                str(r.rank),
                "x".join(map(str, r.shape)) or "scalar",
                r.dtype,
                r.device,
                *(_num(v) for v in (r.mean, r.std, r.minimum, r.maximum, r.norm)),
                str(r.nan),
                str(r.inf),
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        lines.append("  " + "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
    if s.missing_ranks:
        lines.append(f"note: {_ranks_word(list(s.missing_ranks))} did not take part")
    return "\n".join(lines)


def _num(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}"


TEXT.summary = summarize
TEXT.report = render_text
TEXT.spread = render_spread
