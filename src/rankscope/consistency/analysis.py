"""Comparing tensor fingerprints across ranks: who differs from the reference, and by how much.

Pure functions over `rankscope.consistency.model` records: no torch, no Ray, no I/O. The
reference of each tensor is the majority (so the report names the outlier ranks rather than
"ranks differ") or a rank the caller chose. The results the user gets (`ConsistencyReport`,
`TensorCheck`, `RankDelta`, `TensorSpread`) are in `model`, their text in `render`: analysis
never imports render.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import replace

from rankscope.consistency.model import (
    DEFAULT_BUDGET_BYTES,
    ConsistencyReport,
    DiffPlan,
    Fingerprint,
    RankDelta,
    RankDetails,
    RankFingerprints,
    Summary,
    TensorCheck,
    TensorSpread,
    TensorStats,
    TensorStatus,
)


# ------------------------------------------------------------------------------ planning
def plan_differences(
    gathered: Mapping[int, RankFingerprints],
    *,
    reference: str | int = "majority",
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
) -> list[DiffPlan]:
    """Tensors with equal shapes and dtypes but different hashes, in name order.

    Each names the reference rank (the one that sends its copy) and the outliers (who compare
    against it). Tensors are exchanged while they fit in `budget_bytes`; the rest are estimated.
    """
    by_name = _by_name(gathered)
    plans: list[DiffPlan] = []
    spent = 0
    for name in sorted(by_name):
        prints = by_name[name]
        if len(prints) != len(gathered) or _distinct(prints, lambda f: (f.shape, f.dtype)) > 1:
            continue
        if _distinct(prints, lambda f: f.hash) == 1:
            continue
        ref, members, _ = _reference_class(prints, lambda f: f.hash, reference)
        outliers = tuple(sorted(set(prints) - set(members)))
        nbytes = prints[ref].nbytes
        exact = spent + nbytes <= budget_bytes
        spent += nbytes if exact else 0
        on_device = all(f.device.startswith("cuda") for f in prints.values())
        plans.append(DiffPlan(name, ref, outliers, nbytes, exact, on_device))
    return plans


# ---------------------------------------------------------------------------- comparison
def compare(
    gathered: Mapping[int, RankFingerprints],
    details: Mapping[int, RankDetails] | None = None,
    *,
    tolerance: float = 1e-6,
    operation_name: str = "",
    reference: str | int = "majority",
    missing_ranks: tuple[int, ...] = (),
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
    transport: str = "",
) -> ConsistencyReport:
    """Per-tensor statuses from every rank's fingerprints and, for the tensors that differ,
    the exact differences (or summaries to estimate them from).

    Example: `compare({0: fps0, 1: fps1, 2: fps2}).summary`.
    """
    details = details or {}
    plans = {
        p.name: p
        for p in plan_differences(gathered, reference=reference, budget_bytes=budget_bytes)
    }
    all_ranks = tuple(sorted(gathered))
    checks = [
        _with_nonfinite(
            _check_values(name, prints, plans.get(name), details, tolerance, reference, all_ranks),
            prints,
        )
        for name, prints in sorted(_by_name(gathered).items())
    ]
    notes = []
    if isinstance(reference, int) and reference not in gathered:
        notes.append(f"reference rank {reference} did not take part; the majority was used")
    if any(c.estimated for c in checks):
        notes.append(
            f"differences of tensors past the {budget_bytes / 2**20:g} MiB exchange budget are "
            "bounds estimated from sum, sum of squares, min and max"
        )
    skipped = sorted({s for fp in gathered.values() for s in fp.skipped})
    return ConsistencyReport(
        operation_name=operation_name,
        tolerance=tolerance,
        ranks=tuple(sorted(gathered)),
        missing_ranks=tuple(sorted(missing_ranks)),
        tensors=tuple(checks),
        reference=str(reference),
        skipped=tuple(skipped),
        budget_bytes=budget_bytes,
        exchanged_bytes=sum(p.nbytes for p in plans.values() if p.exact),
        transport=transport,
        notes=tuple(notes),
    )


def _with_nonfinite(check: TensorCheck, prints: dict[int, Fingerprint]) -> TensorCheck:
    """The ranks whose copy holds NaN or Inf, whatever the comparison found."""
    return replace(
        check,
        nan_ranks=tuple(sorted(r for r, f in prints.items() if f.nan)),
        inf_ranks=tuple(sorted(r for r, f in prints.items() if f.inf)),
    )


def _check_values(
    name: str,
    prints: dict[int, Fingerprint],
    plan: DiffPlan | None,
    details: Mapping[int, RankDetails],
    tolerance: float,
    reference: str | int,
    all_ranks: tuple[int, ...],
) -> TensorCheck:
    if len(prints) < len(all_ranks):
        absent = tuple(r for r in all_ranks if r not in prints)
        ref = min(prints)
        # Ranks lacking the tensor are the outliers, unless most ranks lack it.
        outliers = absent if 2 * len(prints) >= len(all_ranks) else tuple(sorted(prints))
        return TensorCheck(
            name,
            TensorStatus.MISSING,
            ref,
            outliers,
            prints[ref].shape,
            prints[ref].dtype,
            majority=2 * len(prints) != len(all_ranks),
        )
    for status, key in (
        (TensorStatus.DTYPE_MISMATCH, _dtype_key),
        (TensorStatus.SHAPE_MISMATCH, _shape_key),
    ):
        if _distinct(prints, key) > 1:
            ref, members, majority = _reference_class(prints, key, reference)
            outliers = tuple(sorted(set(prints) - set(members)))
            deltas = tuple(
                RankDelta(r, None, None, shape=prints[r].shape, dtype=prints[r].dtype)
                for r in outliers
            )
            return TensorCheck(
                name,
                status,
                ref,
                outliers,
                prints[ref].shape,
                prints[ref].dtype,
                majority,
                deltas,
            )
    ref, members, majority = _reference_class(prints, _hash_key, reference)
    outliers = tuple(sorted(set(prints) - set(members)))
    shape, dtype = prints[ref].shape, prints[ref].dtype
    if not outliers:
        return TensorCheck(name, TensorStatus.CONSISTENT, ref, (), shape, dtype)
    deltas = tuple(_delta(name, r, ref, details, plan) for r in outliers)
    beyond = any(d.worst is None or not d.worst <= tolerance for d in deltas)
    status = TensorStatus.MISMATCH if beyond else TensorStatus.CLOSE
    return TensorCheck(name, status, ref, outliers, shape, dtype, majority, deltas)


def _delta(
    name: str, rank: int, ref: int, details: Mapping[int, RankDetails], plan: DiffPlan | None
) -> RankDelta:
    mine = details.get(rank)
    exact = mine.differences.get(name) if mine is not None and plan and plan.exact else None
    if exact is not None:
        return RankDelta(rank, exact.max_abs, exact.max_rel)
    a = mine.summaries.get(name) if mine is not None else None
    theirs = details.get(ref)
    b = theirs.summaries.get(name) if theirs is not None else None
    if a is None or b is None:
        return RankDelta(rank, None, None)
    lower, upper = estimate_bounds(a, b)
    return RankDelta(rank, None, None, lower=lower, upper=upper)


def estimate_bounds(a: Summary, b: Summary) -> tuple[float, float]:
    """Bounds of max |a_i - b_i| from two summaries of tensors of the same shape.

    Lower: the mean difference, the difference of norms over sqrt(n), and the differences of
    the extremes all bound it from below. Upper: no element pair differs by more than the
    spread between one tensor's max and the other's min.
    """
    if a.nan or b.nan or a.inf or b.inf:
        return math.inf, math.inf
    n = max(a.numel, 1)
    if a.minimum is None or a.maximum is None or b.minimum is None or b.maximum is None:
        return 0.0, 0.0
    lower = max(
        abs(a.sum - b.sum) / n,
        abs(math.sqrt(max(a.sumsq, 0.0)) - math.sqrt(max(b.sumsq, 0.0))) / math.sqrt(n),
        abs(a.maximum - b.maximum),
        abs(a.minimum - b.minimum),
    )
    upper = max(a.maximum - b.minimum, b.maximum - a.minimum, 0.0)
    return lower, max(upper, lower)


# ---------------------------------------------------------------------------- one tensor
def spread(
    name: str, rows: Mapping[int, TensorStats], *, missing_ranks: tuple[int, ...] = ()
) -> TensorSpread:
    """Rows in rank order. Example: `str(spread("w", {0: stats0, 1: stats1}))`."""
    return TensorSpread(name, tuple(rows[r] for r in sorted(rows)), tuple(sorted(missing_ranks)))


# ------------------------------------------------------------------------------ grouping
def _by_name(gathered: Mapping[int, RankFingerprints]) -> dict[str, dict[int, Fingerprint]]:
    out: dict[str, dict[int, Fingerprint]] = {}
    for rank in sorted(gathered):
        for fp in gathered[rank].fingerprints:
            out.setdefault(fp.name, {})[rank] = fp
    return out


def _dtype_key(f: Fingerprint) -> Hashable:
    return f.dtype


def _shape_key(f: Fingerprint) -> Hashable:
    return f.shape


def _hash_key(f: Fingerprint) -> Hashable:
    return (f.shape, f.dtype, f.hash)


def _distinct(prints: Mapping[int, Fingerprint], key: Callable[[Fingerprint], Hashable]) -> int:
    return len({key(f) for f in prints.values()})


def _reference_class(
    prints: Mapping[int, Fingerprint],
    key: Callable[[Fingerprint], Hashable],
    reference: str | int,
) -> tuple[int, tuple[int, ...], bool]:
    """(reference rank, ranks that agree with it, whether they are a strict majority)."""
    classes: dict[Hashable, list[int]] = {}
    for rank in sorted(prints):
        classes.setdefault(key(prints[rank]), []).append(rank)
    if isinstance(reference, int) and reference in prints:
        return reference, tuple(classes[key(prints[reference])]), True
    best = max(classes.values(), key=lambda ranks: (len(ranks), -ranks[0]))
    sizes = sorted((len(c) for c in classes.values()), reverse=True)
    unique_largest = len(sizes) == 1 or sizes[0] > sizes[1]
    return best[0], tuple(best), unique_largest
