"""What travels between ranks for a consistency check: small records, never whole tensors.

Round 1 carries one `Fingerprint` per tensor (shape, dtype, bitwise hash, NaN/Inf counts).
Only when hashes differ does a later round carry a `Summary` and an exact `Difference` for the
tensors that differ. Everything here is plain data (no torch), so the comparison in
`rankscope.consistency.analysis` is tested without torch or Ray. The enums a check reports
(`TensorStatus`, `Layout`) are here too, below both `analysis` and `render`, which use them.
"""

from __future__ import annotations

import enum
import math
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
