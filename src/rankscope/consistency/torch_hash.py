"""The bitwise hash with torch ops, on whatever device a tensor lives (`fingerprint`'s internals).

The hash is a position-weighted 64-bit checksum of the tensor's raw bytes. The bytes (in
row-major order, whatever the strides) are viewed as int64 words and cut into chunks of
`COLS * rows` words; each chunk is summed column-wise as a `(rows, COLS)` matrix (wrapping
int64 arithmetic, the same on every device), and the column sums are weighted by fixed odd
constants per column and per chunk. Equal bytes always give equal hashes; any change of a
single word, swaps of words that are not a multiple of `COLS` apart, and the like change it.
`COLS` is a prime so that rows of power-of-two widths do not line up with its columns.

`cpu_hash` (numba) computes the same hash on the CPU; these torch ops compute it on any other
device (and on the CPU without numba). Their chunks are about 1 MiB on the CPU, so that the
float sum that probes for NaN/Inf reads the chunk from the cache; on a GPU they are larger to
keep launches few. Every result stays on the device until one transfer per device at the end
(`Results`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = [
    "CHUNK_ADD",
    "CHUNK_MUL",
    "CHUNK_WORDS",
    "COLS",
    "FLOATS",
    "INTEGERS",
    "MASK",
    "SMALL_WORDS",
    "Results",
    "avalanche",
    "column_weights",
    "hash_batch",
    "padded_words",
    "scan_tensor",
    "small_batches",
    "stat_view",
]

COLS = 1021
CHUNK_WORDS = COLS * 128
"""Words of one base chunk (about 1 MiB), each weighted by `_chunk_weight` of its index."""
CHUNK_MUL = 0x9E3779B97F4A7C15
CHUNK_ADD = 0x632BE59BD9B4E019
_CPU_CHUNK_BYTES = 8 * CHUNK_WORDS
_CUDA_CHUNK_BYTES = 8 * COLS * 4096
MASK = (1 << 64) - 1
_SEED = 0x5EED_C0DE

FLOATS = {
    torch.float16: torch.float32,
    torch.bfloat16: torch.float32,
    torch.float32: torch.float32,
}
FLOATS[torch.float64] = torch.float64
INTEGERS = {torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool}


# ---------------------------------------------------------------------------------- scanning
# The hash of a tensor: its bytes, zero-padded to whole int64 words x_0..x_{n-1}, give
#   sum_j x_j * w[j % COLS] * u[j // CHUNK_WORDS]   (mod 2**64), then `avalanche`.
# With torch ops large tensors compute it chunk by chunk (column sums, then weights), small
# ones in batches (one `index_add_` of their rows); CPU tensors go through `cpu_hash`.
SMALL_WORDS = 16 * COLS
"""Tensors up to this many words (128 KiB) are hashed in batches."""
_BATCH_WORDS = {"cpu": 2 * CHUNK_WORDS, "cuda": 64 * CHUNK_WORDS}
"""Words hashed in one batch of small tensors (a few copies of it are made)."""


@dataclass(frozen=True)
class _Scan:
    hash: torch.Tensor
    """0-d int64 on the tensor's device (before `avalanche`)."""
    probe: torch.Tensor
    """0-d float64: the float sum, NaN or Inf when an element is (0 for integers)."""


def scan_tensor(flat: torch.Tensor) -> _Scan:
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
            sums.append(v.sum(dtype=acc) if v.dtype in FLOATS else v.to(acc).sum())
    sums_by_chunk = torch.cat(colsums) if colsums else consts.columns[:0].view(0, COLS)
    h = ((sums_by_chunk * consts.columns).sum(1) * consts.chunks(sums_by_chunk.shape[0])).sum()
    probe = torch.stack(sums).to(torch.float64).sum() if sums else consts.zero
    return _Scan(h, probe)


def _probe_view(flat: torch.Tensor) -> tuple[torch.Tensor | None, torch.dtype | None]:
    """What the NaN/Inf probe sums over: floats only (integers have no NaN or Inf)."""
    values, acc = stat_view(flat)
    if values is None or acc is None or acc == torch.int64:
        return None, None
    return values, acc


def hash_batch(
    batch: list[int], flats: list[torch.Tensor], hashes: Results, probes: Results
) -> None:
    """Hashes of many small tensors on one device with a few ops for the whole batch.

    Each tensor's words are zero-padded to whole rows of `COLS`; one `index_add_` sums the
    rows of each tensor into its column sums, which is exactly `scan_tensor`'s single chunk.
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
        values, acc = stat_view(buf[start:end].reshape(-1).view(dtype))
        if values is None or acc is None or acc == torch.int64:
            continue
        if values.dtype not in FLOATS:
            values = values.to(acc)
        probes.add(members, values.sum(dtype=acc).to(torch.float64).expand(len(members)))


def small_batches(indices: list[int], flats: list[torch.Tensor], device: str) -> list[list[int]]:
    """Groups of small tensors whose words together stay under the batch size."""
    limit = _BATCH_WORDS["cpu" if device == "cpu" else "cuda"]
    out: list[list[int]] = []
    total = 0
    for i in indices:
        words = padded_words(flats[i])
        if not out or total + words > limit:
            out.append([])
            total = 0
        out[-1].append(i)
        total += words
    return out


def padded_words(flat: torch.Tensor) -> int:
    return -(-flat.numel() * flat.element_size() // 8)


def _tail_word(tail: torch.Tensor) -> torch.Tensor:
    """The last nbytes % 8 bytes, zero-padded into one little-endian int64 word."""
    padded = torch.nn.functional.pad(tail, (0, 8 - tail.numel()))
    return padded.view(torch.int64)


def _words(flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The bytes as int64 words, plus the last nbytes % 8 bytes as uint8."""
    if flat.storage_offset() * flat.element_size() % 8:
        flat = flat.clone()  # a view starting mid-word: realign on the same device
    raw = flat.view(torch.uint8) if flat.dtype != torch.uint8 else flat
    whole = raw.numel() // 8 * 8
    return raw[:whole].view(torch.int64), raw[whole:]


def stat_view(flat: torch.Tensor) -> tuple[torch.Tensor | None, torch.dtype | None]:
    """What the numeric summaries reduce over, and the accumulation dtype."""
    if flat.dtype in FLOATS:
        return flat, FLOATS[flat.dtype]
    if flat.dtype == torch.bool:
        return flat.view(torch.uint8), torch.int64
    if flat.dtype in INTEGERS:
        return flat, torch.int64
    if flat.is_complex():
        real = torch.view_as_real(flat).reshape(-1)
        return real, FLOATS.get(real.dtype, torch.float32)
    if flat.is_floating_point():  # float8 and friends: upcast chunk by chunk
        return flat, torch.float32
    return None, None


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
    return ((i * CHUNK_MUL + CHUNK_ADD) | 1) & MASK


_CONSTANTS: dict[str, _Constants] = {}


def _constants(device: torch.device) -> _Constants:
    key = str(device)
    if key not in _CONSTANTS:
        _CONSTANTS[key] = _Constants(device)
    return _CONSTANTS[key]


def _signed(value: int) -> int:
    value &= MASK
    return value - (1 << 64) if value >= 1 << 63 else value


def avalanche(checksums: np.ndarray) -> np.ndarray:
    """Spread the checksums' bits (uint64, on the host, after the one transfer)."""
    h = checksums.astype(np.uint64)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> np.uint64(33))


# ------------------------------------------------------------------------- device -> host
class Results:
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
