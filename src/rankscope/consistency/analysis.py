"""Comparing tensor fingerprints across ranks: who differs from the reference, and by how much.

Pure functions over `rankscope.consistency.model` records: no torch, no Ray, no I/O. The
reference of each tensor is the majority (so the report names the outlier ranks rather than
"ranks differ") or a rank the caller chose. Holds the results the user gets
(`ConsistencyReport`, `TensorCheck`, `RankDelta`, `TensorSpread`); their text is built by
`rankscope.consistency.render`, their status enums live in `model`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field, replace

from rankscope.consistency.model import (
    DiffPlan,
    Fingerprint,
    Layout,
    RankDetails,
    RankFingerprints,
    Summary,
    TensorStats,
    TensorStatus,
)
from rankscope.consistency.render import _size, render_spread, render_text, summarize

DEFAULT_BUDGET_BYTES = 256 * 2**20


@dataclass(frozen=True)
class RankDelta:
    """How far one outlier rank's tensor is from the reference rank's."""

    rank: int
    max_abs: float | None
    """Exact max |a - b| when the tensor was exchanged; None when only estimated."""
    max_rel: float | None
    lower: float | None = None
    """Estimated bounds of max |a - b| from the summaries (over the byte budget)."""
    upper: float | None = None
    shape: tuple[int, ...] | None = None
    dtype: str | None = None

    @property
    def estimated(self) -> bool:
        return self.max_abs is None and self.upper is not None

    @property
    def worst(self) -> float | None:
        """The exact max |d|, else its upper bound."""
        return self.max_abs if self.max_abs is not None else self.upper


@dataclass(frozen=True)
class TensorCheck:
    """One tensor across the ranks."""

    name: str
    status: TensorStatus
    reference_rank: int | None
    outlier_ranks: tuple[int, ...]
    shape: tuple[int, ...] | None
    """The reference rank's shape and dtype."""
    dtype: str | None
    majority: bool = True
    """False when the largest group of agreeing ranks was tied (the reference is then the
    lowest rank of the tie): the outliers may as well be the reference's group."""
    deltas: tuple[RankDelta, ...] = ()
    nan_ranks: tuple[int, ...] = ()
    inf_ranks: tuple[int, ...] = ()

    @property
    def max_abs(self) -> float | None:
        values = [d.worst for d in self.deltas if d.worst is not None]
        return max(values) if values else None

    @property
    def max_rel(self) -> float | None:
        values = [d.max_rel for d in self.deltas if d.max_rel is not None]
        return max(values) if values else None

    @property
    def estimated(self) -> bool:
        return any(d.estimated for d in self.deltas)

    @property
    def differs(self) -> bool:
        return self.status is not TensorStatus.CONSISTENT


@dataclass(frozen=True)
class ConsistencyReport:
    """The outcome of `verify_distributed_tensors`, the same on every rank that took part."""

    operation_name: str
    tolerance: float
    ranks: tuple[int, ...]
    """Ranks whose fingerprints were compared."""
    missing_ranks: tuple[int, ...]
    """Ranks expected but absent when the deadline passed (hub transport only)."""
    tensors: tuple[TensorCheck, ...]
    reference: str = "majority"
    skipped: tuple[str, ...] = ()
    """Non-tensor entries of the input (named, not compared)."""
    budget_bytes: int = DEFAULT_BUDGET_BYTES
    exchanged_bytes: int = 0
    """Bytes of differing tensors exchanged to compute exact differences."""
    transport: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def differing(self) -> tuple[TensorCheck, ...]:
        return tuple(t for t in self.tensors if t.differs)

    @property
    def mismatched(self) -> tuple[TensorCheck, ...]:
        return tuple(t for t in self.tensors if t.differs and t.status is not TensorStatus.CLOSE)

    @property
    def nan_ranks(self) -> tuple[int, ...]:
        return tuple(sorted({r for t in self.tensors for r in t.nan_ranks}))

    @property
    def inf_ranks(self) -> tuple[int, ...]:
        return tuple(sorted({r for t in self.tensors for r in t.inf_ranks}))

    @property
    def ok(self) -> bool:
        """Every tensor bitwise equal or within tolerance, no NaN/Inf, every rank present."""
        return not (self.mismatched or self.nan_ranks or self.inf_ranks or self.missing_ranks)

    @property
    def outlier_counts(self) -> dict[int, int]:
        """Rank -> number of differing tensors in which it is an outlier."""
        counts = Counter(r for t in self.differing for r in t.outlier_ranks)
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def check(self, name: str) -> TensorCheck:
        """The check of one tensor by name; KeyError when it was not compared."""
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    @property
    def summary(self) -> str:
        """One line: what differs, who the outlier is, and the worst tensor."""
        return summarize(self)

    def __str__(self) -> str:
        return render_text(self)


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
            f"differences of tensors past the {_size(budget_bytes)} exchange budget are "
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
@dataclass(frozen=True)
class TensorSpread:
    """`inspect_distributed_tensor`'s result: one row per rank, and what the rows say."""

    name: str
    rows: tuple[TensorStats, ...]
    missing_ranks: tuple[int, ...] = ()

    @property
    def layout(self) -> Layout:
        if len(self.rows) <= 1:
            return Layout.SINGLE
        if len({(r.shape, r.dtype) for r in self.rows}) > 1:
            return Layout.SHARDED
        if len({r.hash for r in self.rows}) == 1:
            return Layout.REPLICATED
        return Layout.DIVERGENT

    @property
    def total_numel(self) -> int:
        return sum(r.numel for r in self.rows)

    def __str__(self) -> str:
        return render_spread(self)


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
