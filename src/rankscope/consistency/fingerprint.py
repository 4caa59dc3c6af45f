"""Fingerprints computed where a tensor lives: torch ops on its own device, no host copy.

The hash is a position-weighted 64-bit checksum of the tensor's raw bytes. The bytes (in
row-major order, whatever the strides) are viewed as int64 words and cut into chunks of
`COLS * rows` words; each chunk is summed column-wise as a `(rows, COLS)` matrix (wrapping
int64 arithmetic, the same on every device), and the column sums are weighted by fixed odd
constants per column and per chunk. Equal bytes always give equal hashes; any change of a
single word, swaps of words that are not a multiple of `COLS` apart, and the like change it.
`COLS` is a prime so that rows of power-of-two widths do not line up with its columns.

CPU tensors are hashed by `cpu_hash` (one read of their memory, numba); the torch ops here
compute the same hash on any other device (and on the CPU without numba). Their chunks are
about 1 MiB on the CPU, so that the float sum that probes for NaN/Inf reads the chunk from the
cache; on a GPU they are larger to keep launches few. Every result stays on the device until
one transfer per device at the end.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import torch

from rankscope.consistency import cpu_hash
from rankscope.consistency.model import Difference, Fingerprint, Summary, TensorStats

COLS = 1021
CHUNK_WORDS = COLS * 128
"""Words of one base chunk (about 1 MiB), each weighted by `_chunk_weight` of its index."""
CHUNK_MUL = 0x9E3779B97F4A7C15
CHUNK_ADD = 0x632BE59BD9B4E019
_CPU_CHUNK_BYTES = 8 * CHUNK_WORDS
_CUDA_CHUNK_BYTES = 8 * COLS * 4096
_MASK = (1 << 64) - 1
_SEED = 0x5EED_C0DE

_FLOATS = {
    torch.float16: torch.float32,
    torch.bfloat16: torch.float32,
    torch.float32: torch.float32,
}
_FLOATS[torch.float64] = torch.float64
_INTEGERS = {torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool}


@cache
def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def fingerprint_tensors(items: Sequence[tuple[str, torch.Tensor]]) -> list[Fingerprint]:
    """Hash and NaN/Inf counts of each tensor; one transfer to the host per device.

    CPU tensors go through the kernel all at once. Elsewhere small tensors are hashed together
    in batches (a handful of torch ops per batch rather than per tensor), large ones chunk by
    chunk. Example: `fingerprint_tensors([("w", model.weight)])[0].hash`.
    """
    tensors = [_local(t) for _, t in items]
    devices = ["cpu" if t.is_cpu else str(t.device) for t in tensors]
    checksums = np.zeros(len(items), dtype=np.uint64)
    suspects = np.zeros(len(items), dtype=bool)
    on_host: list[int] = []
    on_device: dict[str, list[int]] = {}
    kernel = cpu_hash.available()
    for i, t in enumerate(tensors):
        if kernel and _for_kernel(t, devices[i]):
            on_host.append(i)
            if not _in_place(t):  # a strided, conjugate or misaligned view: a fresh copy
                flat = _flat(t)
                tensors[i] = flat if _in_place(flat) else flat.clone()
        else:
            on_device.setdefault(devices[i], []).append(i)
    if on_host:
        checksums[on_host], suspects[on_host] = cpu_hash.hash_tensors([tensors[i] for i in on_host])
    hashes, probes = _Results(), _Results()
    for device, indices in on_device.items():
        small = []
        for i in indices:
            tensors[i] = _flat(tensors[i])
            if _padded_words(tensors[i]) <= _SMALL_WORDS:
                small.append(i)
            else:
                scan = _scan(tensors[i])
                hashes.add([i], scan.hash.view(1))
                probes.add([i], scan.probe.view(1))
        for batch in _batches(small, tensors, device):
            _hash_batch(batch, tensors, hashes, probes)
    for i, value in hashes.items():
        checksums[i] = value & _MASK
    for i, value in probes.items():
        suspects[i] = not math.isfinite(value)
    counts = _nonfinite_counts(tensors, suspects.tolist())
    mixed = _avalanche(checksums).tolist()
    return [
        Fingerprint(
            name, tuple(t.shape), dtype_name(t.dtype), mixed[i], *counts.get(i, (0, 0)), devices[i]
        )
        for i, (name, t) in enumerate(items)
    ]


def summarize_tensors(items: Sequence[tuple[str, torch.Tensor]]) -> dict[str, Summary]:
    """Sum, sum of squares, min, max and NaN/Inf counts of each tensor, computed in place."""
    flats = [_flat(t) for _, t in items]
    stats = _Results()
    for i, flat in enumerate(flats):
        stats.add([i], _summary(flat).view(1, 4))
    rows = stats.rows(len(items))
    counts = _nonfinite_counts(flats, [not math.isfinite(sum(r)) for r in rows])
    out = {}
    for i, ((name, t), row) in enumerate(zip(items, rows, strict=True)):
        empty = t.numel() == 0 or (math.isnan(row[2]) and not counts.get(i, (0, 0))[0])
        nan, inf = counts.get(i, (0, 0))
        out[name] = Summary(
            numel=t.numel(),
            sum=row[0],
            sumsq=row[1],
            minimum=None if empty else row[2],
            maximum=None if empty else row[3],
            nan=nan,
            inf=inf,
        )
    return out


def difference(local: torch.Tensor, reference: torch.Tensor) -> Difference:
    """Max absolute and max relative element difference; NaN in the same place counts as equal.

    Only the elements that differ are compared in float64: usually a few, so one comparison
    in the tensor's own dtype is most of the cost (8x faster on a 2.4M-element tensor).
    """
    a, b = _real_view(local), _real_view(reference.to(local.device))
    differs = a != b  # NaN != NaN too: NaNs in the same place are sorted out below
    x, y = a[differs].to(torch.float64), b[differs].to(torch.float64)
    if x.numel() == 0:
        return Difference(0.0, 0.0)
    inf = math.inf  # a NaN against a number, inf against -inf: infinitely apart
    d = torch.where(x.isnan() & y.isnan(), 0.0, (x - y).abs()).nan_to_num_(nan=inf, posinf=inf)
    rel = torch.where(d == 0, 0.0, d / y.abs()).nan_to_num_(nan=inf, posinf=inf)
    values = torch.stack([d.max(), rel.max()]).tolist()
    return Difference(float(values[0]), float(values[1]))


def describe(tensor: torch.Tensor, rank: int) -> TensorStats:
    """Mean, std, min, max, norm and NaN/Inf counts of one tensor (float64, on its device)."""
    t = tensor.detach()
    fp = fingerprint_tensors([("", t)])[0]
    stats: list[float | None] = [None] * 5
    if t.numel():
        x = _as_float(t)
        finite = x[x.isfinite()]
        if finite.numel():
            std = finite.std() if finite.numel() > 1 else torch.zeros((), dtype=x.dtype)
            values = torch.stack(
                [
                    finite.mean(),
                    std,
                    finite.min(),
                    finite.max(),
                    torch.linalg.vector_norm(finite),
                ]
            ).tolist()
            stats = [float(v) for v in values]
    return TensorStats(
        rank,
        tuple(t.shape),
        dtype_name(t.dtype),
        str(t.device),
        t.numel(),
        mean=stats[0],
        std=stats[1],
        minimum=stats[2],
        maximum=stats[3],
        norm=stats[4],
        nan=fp.nan,
        inf=fp.inf,
        hash=fp.hash,
    )


# ---------------------------------------------------------------------------------- scanning
# The hash of a tensor: its bytes, zero-padded to whole int64 words x_0..x_{n-1}, give
#   sum_j x_j * w[j % COLS] * u[j // CHUNK_WORDS]   (mod 2**64), then `_avalanche`.
# With torch ops large tensors compute it chunk by chunk (column sums, then weights), small
# ones in batches (one `index_add_` of their rows); CPU tensors go through `cpu_hash`.
_SMALL_WORDS = 16 * COLS
"""Tensors up to this many words (128 KiB) are hashed in batches."""
_BATCH_WORDS = {"cpu": 2 * CHUNK_WORDS, "cuda": 64 * CHUNK_WORDS}
"""Words hashed in one batch of small tensors (a few copies of it are made)."""


@dataclass(frozen=True)
class _Scan:
    hash: torch.Tensor
    """0-d int64 on the tensor's device (before `_avalanche`)."""
    probe: torch.Tensor
    """0-d float64: the float sum, NaN or Inf when an element is (0 for integers)."""


def _scan(flat: torch.Tensor) -> _Scan:
    """Hash of one tensor with torch ops on its device, chunk by chunk.

    Each chunk's float sum (the NaN/Inf probe) follows its hash while the chunk is in cache.
    """
    device = flat.device
    consts = _constants(device)
    nbytes = flat.numel() * flat.element_size()
    words, tail = _words(flat)
    per_chunk = _CUDA_CHUNK_BYTES if device.type == "cuda" else _CPU_CHUNK_BYTES
    step_words = per_chunk // 8
    values, acc = _probe_view(flat)
    step_values = per_chunk // values.element_size() if values is not None else 0
    colsums: list[torch.Tensor] = []
    sums: list[torch.Tensor] = []
    n_chunks = max(1, math.ceil(nbytes / per_chunk))
    for i in range(n_chunks):
        w = words[i * step_words : (i + 1) * step_words]
        whole = w.numel() // CHUNK_WORDS
        if whole:  # base chunks: their column sums, weighted per base chunk below
            base = w[: whole * CHUNK_WORDS].view(whole, CHUNK_WORDS // COLS, COLS)
            colsums.append(base.sum(1))
        w = w[whole * CHUNK_WORDS :]
        rest = w[w.numel() // COLS * COLS :]
        if i == n_chunks - 1 and tail.numel():
            rest = torch.cat([rest, _tail_word(tail)])
        if w.numel() or rest.numel():
            colsum = w[: w.numel() // COLS * COLS].view(-1, COLS).sum(0)
            if rest.numel():
                colsum = colsum + torch.nn.functional.pad(rest, (0, COLS - rest.numel()))
            colsums.append(colsum.view(1, COLS))
        if values is not None and acc is not None:
            v = values[i * step_values : (i + 1) * step_values]
            sums.append(v.sum(dtype=acc) if v.dtype in _FLOATS else v.to(acc).sum())
    sums_by_chunk = torch.cat(colsums) if colsums else consts.columns[:0].view(0, COLS)
    h = ((sums_by_chunk * consts.columns).sum(1) * consts.chunks(sums_by_chunk.shape[0])).sum()
    probe = torch.stack(sums).to(torch.float64).sum() if sums else consts.zero
    return _Scan(h, probe)


def _probe_view(flat: torch.Tensor) -> tuple[torch.Tensor | None, torch.dtype | None]:
    """What the NaN/Inf probe sums over: floats only (integers have no NaN or Inf)."""
    values, acc = _stat_view(flat)
    if values is None or acc is None or acc == torch.int64:
        return None, None
    return values, acc


def _summary(flat: torch.Tensor) -> torch.Tensor:
    """(4,) float64 on the device: sum, sum of squares, min, max (NaN min/max when empty)."""
    f64 = torch.float64
    values, acc = _stat_view(flat)
    if values is None or acc is None or values.numel() == 0:
        nan = math.nan
        return torch.tensor([0.0, 0.0, nan, nan], dtype=f64, device=flat.device)
    if values.dtype not in _FLOATS and values.dtype not in _INTEGERS:
        values = values.to(acc)
    norm = (
        torch.linalg.vector_norm(values.double())
        if acc == torch.int64
        else torch.linalg.vector_norm(values, dtype=acc)
    )
    lo, hi = torch.aminmax(values)
    return torch.stack(
        [
            values.sum(dtype=acc).to(f64),
            norm.to(f64) ** 2,
            lo.to(f64),
            hi.to(f64),
        ]
    )


def _hash_batch(
    batch: list[int], flats: list[torch.Tensor], hashes: _Results, probes: _Results
) -> None:
    """Hashes of many small tensors on one device with a few ops for the whole batch.

    Each tensor's words are zero-padded to whole rows of `COLS`; one `index_add_` sums the
    rows of each tensor into its column sums, which is exactly `_scan`'s single chunk.
    """
    device = flats[batch[0]].device
    consts = _constants(device)
    batch = sorted(batch, key=lambda i: str(flats[i].dtype))  # one region per dtype
    row_bytes = 8 * COLS
    pieces: list[torch.Tensor] = []
    rows_per: list[int] = []
    regions: dict[torch.dtype, tuple[int, int, list[int]]] = {}
    total_rows = 0
    for i in batch:
        flat = flats[i]
        raw = flat.view(torch.uint8) if flat.dtype != torch.uint8 else flat
        pieces.append(raw)
        pad = -raw.numel() % row_bytes
        if pad:
            pieces.append(consts.zero_row[:pad])
        rows = (raw.numel() + pad) // row_bytes
        rows_per.append(rows)
        start, _, members = regions.get(flat.dtype, (total_rows, 0, []))
        regions[flat.dtype] = (start, total_rows + rows, [*members, i])
        total_rows += rows
    buf = torch.cat(pieces).view(torch.int64).view(-1, COLS)
    owner = torch.repeat_interleave(
        torch.arange(len(batch), device=device),
        torch.tensor(rows_per, dtype=torch.int64, device=device),
        output_size=total_rows,
    )
    colsums = torch.zeros(len(batch), COLS, dtype=torch.int64, device=device)
    colsums.index_add_(0, owner, buf)
    hashes.add(batch, (colsums * consts.columns).sum(1) * consts.chunks(1))
    for dtype, (start, end, members) in regions.items():
        values, acc = _stat_view(buf[start:end].reshape(-1).view(dtype))
        if values is None or acc is None or acc == torch.int64:
            continue
        if values.dtype not in _FLOATS:
            values = values.to(acc)
        probes.add(members, values.sum(dtype=acc).to(torch.float64).expand(len(members)))


def _batches(indices: list[int], flats: list[torch.Tensor], device: str) -> list[list[int]]:
    """Groups of small tensors whose words together stay under the batch size."""
    limit = _BATCH_WORDS["cpu" if device == "cpu" else "cuda"]
    out: list[list[int]] = []
    total = 0
    for i in indices:
        words = _padded_words(flats[i])
        if not out or total + words > limit:
            out.append([])
            total = 0
        out[-1].append(i)
        total += words
    return out


def _padded_words(flat: torch.Tensor) -> int:
    return -(-flat.numel() * flat.element_size() // 8)


def _tail_word(tail: torch.Tensor) -> torch.Tensor:
    """The last nbytes % 8 bytes, zero-padded into one little-endian int64 word."""
    padded = torch.nn.functional.pad(tail, (0, 8 - tail.numel()))
    return padded.view(torch.int64)


def _local(t: torch.Tensor) -> torch.Tensor:
    """This rank's part: a DTensor's local shard, any other tensor as it is."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def _for_kernel(t: torch.Tensor, device: str) -> bool:
    """Whether the CPU kernel hashes `t`: a dense CPU tensor of a dtype it knows."""
    return device == "cpu" and t.layout == torch.strided and t.dtype in cpu_hash.PROBES


def _in_place(t: torch.Tensor) -> bool:
    """Whether the kernel can read `t`'s memory as it is (else it reads a contiguous copy)."""
    return t.is_contiguous() and not t.is_conj() and not t.is_neg() and t.data_ptr() % 8 == 0


def _flat(t: torch.Tensor) -> torch.Tensor:
    """Detached, contiguous, 1-D, row-major: strides never change the hash, only values do.

    Conjugate and negative views are resolved first, so the bytes hashed are the values.
    """
    t = _local(t).detach()
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    t = t if t.is_contiguous() else t.contiguous()
    return t.as_strided((t.numel(),), (1,))  # not reshape: a one-element view keeps its stride


def _words(flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The bytes as int64 words, plus the last nbytes % 8 bytes as uint8."""
    if flat.storage_offset() * flat.element_size() % 8:
        flat = flat.clone()  # a view starting mid-word: realign on the same device
    raw = flat.view(torch.uint8) if flat.dtype != torch.uint8 else flat
    whole = raw.numel() // 8 * 8
    return raw[:whole].view(torch.int64), raw[whole:]


def _stat_view(flat: torch.Tensor) -> tuple[torch.Tensor | None, torch.dtype | None]:
    """What the numeric summaries reduce over, and the accumulation dtype."""
    if flat.dtype in _FLOATS:
        return flat, _FLOATS[flat.dtype]
    if flat.dtype == torch.bool:
        return flat.view(torch.uint8), torch.int64
    if flat.dtype in _INTEGERS:
        return flat, torch.int64
    if flat.is_complex():
        real = torch.view_as_real(flat).reshape(-1)
        return real, _FLOATS.get(real.dtype, torch.float32)
    if flat.is_floating_point():  # float8 and friends: upcast chunk by chunk
        return flat, torch.float32
    return None, None


def _real_view(t: torch.Tensor) -> torch.Tensor:
    """1-D, complex tensors as their (real, imaginary) pairs."""
    t = _flat(t)
    return torch.view_as_real(t).reshape(-1) if t.is_complex() else t


def _as_float(t: torch.Tensor) -> torch.Tensor:
    return _real_view(t).to(torch.float64)


def column_weights() -> torch.Tensor:
    """The odd 64-bit weight of each column, on the CPU; the same in every process."""
    gen = torch.Generator().manual_seed(_SEED)
    return torch.randint(-(2**63), 2**63 - 1, (COLS,), generator=gen) | 1


class _Constants:
    """Column and chunk weights on one device."""

    def __init__(self, device: torch.device) -> None:
        self.columns = column_weights().to(device)
        self.zero_row = torch.zeros(8 * COLS, dtype=torch.uint8, device=device)
        self.zero = torch.zeros((), dtype=torch.float64, device=device)
        self._chunk_table = torch.empty(0, dtype=torch.int64, device=device)
        self._device = device

    def chunks(self, n: int) -> torch.Tensor:
        if self._chunk_table.numel() < n:
            size = max(n, 2 * self._chunk_table.numel(), 1024)
            table = [_signed(_chunk_weight(i)) for i in range(size)]
            self._chunk_table = torch.tensor(table, dtype=torch.int64, device=self._device)
        return self._chunk_table[:n]


def _chunk_weight(i: int) -> int:
    """The odd weight of base chunk `i` (`numba_kernel` computes the same inline)."""
    return ((i * CHUNK_MUL + CHUNK_ADD) | 1) & _MASK


_CONSTANTS: dict[str, _Constants] = {}


def _constants(device: torch.device) -> _Constants:
    key = str(device)
    if key not in _CONSTANTS:
        _CONSTANTS[key] = _Constants(device)
    return _CONSTANTS[key]


def _signed(value: int) -> int:
    value &= _MASK
    return value - (1 << 64) if value >= 1 << 63 else value


def _avalanche(checksums: np.ndarray) -> np.ndarray:
    """Spread the checksums' bits (uint64, on the host, after the one transfer)."""
    h = checksums.astype(np.uint64)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> np.uint64(33))


# ------------------------------------------------------------------------- device -> host
class _Results:
    """Values left on their devices until one transfer per device."""

    def __init__(self) -> None:
        self._parts: dict[torch.device, list[tuple[list[int], torch.Tensor]]] = {}

    def add(self, indices: list[int], values: torch.Tensor) -> None:
        self._parts.setdefault(values.device, []).append((indices, values))

    def items(self) -> list[tuple[int, Any]]:
        """(index, value) of everything added, fetched with one transfer per device."""
        out: list[tuple[int, Any]] = []
        for parts in self._parts.values():
            host = torch.cat([v for _, v in parts]).tolist()
            out += zip([i for idx, _ in parts for i in idx], host, strict=True)
        return out

    def rows(self, n: int) -> list[list[float]]:
        """Each of the `n` indices' row of floats (empty where nothing was added)."""
        out: list[list[float]] = [[] for _ in range(n)]
        for i, row in self.items():
            out[i] = [float(x) for x in row]
        return out


def _nonfinite_counts(
    flats: list[torch.Tensor], suspects: list[bool]
) -> dict[int, tuple[int, int]]:
    """NaN and Inf counts, counted only where a cheaper probe saw a NaN or Inf."""
    counts = _Results()
    for i, (t, suspect) in enumerate(zip(flats, suspects, strict=True)):
        if suspect and (t.is_floating_point() or t.is_complex()):
            counts.add([i], torch.stack([t.isnan().sum(), t.isinf().sum()]).view(1, 2))
    return {i: (int(nan), int(inf)) for i, (nan, inf) in counts.items()}
