"""What travels between ranks for a consistency check: small records, never whole tensors.

Round 1 carries one `Fingerprint` per tensor (shape, dtype, bitwise hash, NaN/Inf counts).
Only when hashes differ does a later round carry a `Summary` and an exact `Difference` for the
tensors that differ. Everything here is plain data (no torch), so the comparison in
`rankscope.consistency.analysis` is tested without torch or Ray. What the user gets back
(`ConsistencyReport`, `TensorCheck`, `RankDelta`, `TensorSpread`) and the enums they report
(`TensorStatus`, `Layout`) are here too, below both `analysis` and `render`, which use them.
Their text comes from `render` through `TEXT`, which render fills in when it is imported.
"""

from __future__ import annotations

import enum
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field


class TensorStatus(enum.Enum):
    """How one tensor compares across the ranks."""

    CONSISTENT = "consistent"
    """Bitwise equal on every rank."""
    CLOSE = "close"
    """Not bitwise equal, but every element within the tolerance of the reference."""
    MISMATCH = "mismatch"
    """Some element differs from the reference by more than the tolerance."""
    SHAPE_MISMATCH = "shape-mismatch"
    """The shapes differ across ranks: values are not compared."""
    DTYPE_MISMATCH = "dtype-mismatch"
    """The dtypes differ across ranks: values are not compared."""
    MISSING = "missing"
    """Some ranks do not have this tensor at all."""


class Layout(enum.Enum):
    """How one tensor is spread over the ranks."""

    REPLICATED = "replicated"
    """Bitwise equal on every rank."""
    SHARDED = "sharded"
    """Shapes differ across ranks: each holds a piece."""
    DIVERGENT = "divergent"
    """Same shape and dtype everywhere, different values: shards of equal size, or drift."""
    SINGLE = "single"
    """Only one rank took part."""


@dataclass(slots=True)
class Fingerprint:
    """One tensor on one rank, as computed where the tensor lives.

    Not frozen: a check builds thousands of these, and a frozen init costs 3 µs each.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    """torch dtype without the `torch.` prefix: `float32`, `bfloat16`, `bool`."""
    hash: int
    """64-bit checksum of the raw bytes in row-major order: equal bytes give equal hashes."""
    nan: int = 0
    inf: int = 0
    device: str = "cpu"

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * dtype_size(self.dtype)


@dataclass(frozen=True)
class Summary:
    """Numeric summary of one tensor on one rank; `minimum`/`maximum` are None when empty."""

    numel: int
    sum: float
    sumsq: float
    minimum: float | None
    maximum: float | None
    nan: int = 0
    inf: int = 0


@dataclass(frozen=True)
class Difference:
    """Exact element-wise difference of one rank's tensor against the reference rank's."""

    max_abs: float
    max_rel: float


@dataclass(frozen=True)
class RankFingerprints:
    """Everything one rank contributes to round 1."""

    rank: int
    fingerprints: tuple[Fingerprint, ...]
    skipped: tuple[str, ...] = ()
    """Entries that were not tensors (ints, strings in a state dict): named, not compared."""
    error: str | None = None
    """Set when this rank could not fingerprint its tensors; it still takes part, uncompared."""
    input_error: str | None = None
    """Set when this rank's arguments are wrong: every rank then raises it, none hangs."""


@dataclass(frozen=True)
class RankDetails:
    """What one rank contributes to round 2, for the tensors that differ only."""

    rank: int
    summaries: dict[str, Summary] = field(default_factory=dict)
    differences: dict[str, Difference] = field(default_factory=dict)


@dataclass(frozen=True)
class TensorStats:
    """One rank's view of one tensor, for `inspect_distributed_tensor`."""

    rank: int
    shape: tuple[int, ...]
    dtype: str
    device: str
    numel: int
    mean: float | None
    """Mean, std, min, max and norm are over the finite elements; None when there are none."""
    std: float | None
    minimum: float | None
    maximum: float | None
    norm: float | None
    nan: int
    inf: int
    hash: int


@dataclass(frozen=True)
class DiffPlan:
    """A tensor whose hashes differ: who holds the reference copy and who must compare to it."""

    name: str
    reference: int
    outliers: tuple[int, ...]
    nbytes: int
    exact: bool
    """True when the tensor fits in the byte budget and its reference copy is exchanged."""
    on_device: bool = False
    """True when every rank holds it on a GPU: the copy then travels over NCCL. Computed from
    every rank's fingerprints, so all ranks choose the same group for the same tensor."""


_DTYPE_SIZES = {
    "bool": 1,
    "uint8": 1,
    "int8": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "int16": 2,
    "uint16": 2,
    "float16": 2,
    "bfloat16": 2,
    "int32": 4,
    "uint32": 4,
    "float32": 4,
    "complex32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "complex64": 8,
    "complex128": 16,
}


def dtype_size(dtype: str) -> int:
    """Bytes per element of a dtype name (4 for names this table does not know)."""
    return _DTYPE_SIZES.get(dtype, 4)


# --------------------------------------------------------------------- what the user gets
class ReportText:
    """How the reports read as text: `render` sets these when it is imported (the package's
    `__init__` imports it), so that this module, below render, never imports it."""

    def __init__(self) -> None:
        self.summary: Callable[[ConsistencyReport], str] = _unset
        self.report: Callable[[ConsistencyReport], str] = _unset
        self.spread: Callable[[TensorSpread], str] = _unset


def _unset(value: object) -> str:
    raise RuntimeError("import rankscope.consistency (it sets the reports' text)")


TEXT = ReportText()


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
        return TEXT.summary(self)

    def __str__(self) -> str:
        return TEXT.report(self)


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
        return TEXT.spread(self)
