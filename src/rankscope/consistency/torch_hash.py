"""The bitwise hash with torch ops, on whatever device a tensor lives (`fingerprint`'s internals).

The hash is a position-weighted 64-bit checksum of the tensor's raw bytes. The bytes (in
row-major order, whatever the strides) are viewed as int64 words and cut into chunks of
`COLS * rows` words; each chunk is summed column-wise as a `(rows, COLS)` matrix (wrapping
int64 arithmetic, the same on every device), and the column sums are weighted by fixed odd
constants per column and per chunk. Equal bytes always give equal hashes; any change of a
single word, swaps of words that are not a multiple of `COLS` apart, and the like change it.
`COLS` is a prime so that rows of power-of-two widths do not line up with its columns.

`cpu_hash` (numba) computes the same hash on the CPU; these torch ops compute it on any other
device (and on the CPU without numba). Their chunks are about 4 MiB on the CPU, so that the
float sum that probes for NaN/Inf reads the chunk from the cache; on a GPU they are larger to
keep launches few. Column sums add 16 rows at a time, then those partial sums: torch reduces a
short dimension at memory speed and a long strided one well below it. Every result stays on
the device until one transfer per device at the end (`Results`).
"""

from __future__ import annotations

import functools
import itertools
import math
import threading
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
    "words_of",
]

COLS = 1021
CHUNK_WORDS = COLS * 128
"""Words of one base chunk (about 1 MiB), each weighted by `_chunk_weight` of its index."""
CHUNK_MUL = 0x9E3779B97F4A7C15
CHUNK_ADD = 0x632BE59BD9B4E019
_CPU_CHUNK_BYTES = 4 * 8 * CHUNK_WORDS
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
_PART_ROWS = 16
_PARTS = CHUNK_WORDS // COLS // _PART_ROWS
"""A base chunk's 128 rows, summed as 8 parts of 16 rows (see the module's docstring)."""
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
    The words after the last whole base chunk (fewer than 128 rows) are summed as one block:
    short and in cache, one reduction beats splitting them into parts.
    """
    device = flat.device
    consts = _constants(device)
    nbytes = flat.numel() * flat.element_size()
    words, tail = _words(flat, consts)
    per_chunk = _CUDA_CHUNK_BYTES if device.type == "cuda" else _CPU_CHUNK_BYTES
    step_words = per_chunk // 8  # whole base chunks
    in_whole = words.numel() // CHUNK_WORDS * CHUNK_WORDS
    values, acc = _probe_view(flat)
    step_values = per_chunk // values.element_size() if values is not None else 0
    colsums: list[torch.Tensor] = []
    sums: list[torch.Tensor] = []
    for i in range(max(1, math.ceil(nbytes / per_chunk))):
        start = i * step_words
        if start < in_whole:  # base chunks: their column sums, weighted per base chunk below
            w = words[start : min(start + step_words, in_whole)]
            colsums.append(w.view(-1, _PART_ROWS, COLS).sum(1).view(-1, _PARTS, COLS).sum(1))
        if values is not None and acc is not None:
            v = values[i * step_values : (i + 1) * step_values]
            sums.append(v.sum(dtype=acc) if v.dtype in FLOATS else v.to(acc).sum())
    partial = _partial_colsum(words, in_whole, tail)
    if partial is not None:
        colsums.append(partial)
    if not colsums:
        return _Scan(consts.columns[:0].sum(), consts.zero)
    sums_by_chunk = torch.cat(colsums) if len(colsums) > 1 else colsums[0]
    weighted = _weighted(sums_by_chunk, consts.columns)
    chunks = consts.chunks(sums_by_chunk.shape[0])
    h = weighted @ chunks if weighted.is_cpu else (weighted * chunks).sum()
    if len(sums) > 1:
        probe = torch.stack(sums).to(torch.float64).sum()
    else:
        probe = sums[0].to(torch.float64) if sums else consts.zero
    return _Scan(h, probe)


def _partial_colsum(words: torch.Tensor, in_whole: int, tail: torch.Tensor) -> torch.Tensor | None:
    """The `(1, COLS)` column sums of what follows the whole base chunks (its whole rows, then
    the rest and the tail bytes zero-padded to a row); None when nothing does."""
    rows = (words.numel() - in_whole) // COLS
    rest = words[in_whole + rows * COLS :]
    if tail.numel():
        rest = torch.cat([rest, _tail_word(tail)])
    colsum = torch.nn.functional.pad(rest, (0, COLS - rest.numel())) if rest.numel() else None
    if rows:
        block = words[in_whole : in_whole + rows * COLS].view(rows, COLS).sum(0)
        colsum = block if colsum is None else colsum + block
    return None if colsum is None else colsum.view(1, COLS)


def _weighted(colsums: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """Each row's column sums weighted by `columns` (int64, wrapping): one matrix-vector
    product on the CPU; CUDA has no integer ones."""
    if colsums.is_cpu:
        return colsums @ columns
    return (colsums * columns).sum(1)


def _probe_view(flat: torch.Tensor) -> tuple[torch.Tensor | None, torch.dtype | None]:
    """What the NaN/Inf probe sums over: floats only (integers have no NaN or Inf)."""
    values, acc = stat_view(flat)
    if values is None or acc is None or acc == torch.int64:
        return None, None
    return values, acc


def hash_batch(
    batch: list[int],
    flats: list[torch.Tensor],
    hashes: Results,
    probes: Results,
    kinds_of: dict[int, tuple[torch.dtype, int]] | None = None,
) -> None:
    """Hashes of many small tensors on one device with a few ops for the whole batch.

    Tensors of one dtype and size (a model's layers repeat a few shapes) are concatenated
    as they are, and each one's rows summed through one strided view; the others are
    concatenated zero-padded to whole rows of `COLS` words, in order of their row counts, so
    that each row count is one `(tensors, rows, COLS)` block. Either way each tensor's
    column sums are exactly `scan_tensor`'s single chunk. The NaN/Inf probe is one float sum
    per concatenation. `kinds_of`: each index's (dtype, numel), when the caller has them.
    """
    consts = _constants(flats[batch[0]].device)
    kinds: dict[tuple[torch.dtype, int], list[int]] = {}
    if kinds_of is None:
        kinds_of = {i: (flats[i].dtype, flats[i].numel()) for i in batch}
    for i in batch:
        kinds.setdefault(kinds_of[i], []).append(i)
    padded: dict[torch.dtype, list[int]] = {}
    for (dtype, numel), members in kinds.items():
        nbytes = numel * _element_size(dtype)
        if len(members) > 1 and nbytes % 8 == 0:
            buf = _concatenated([flats[i] for i in members], len(members) * nbytes)
            colsums = _alike_colsums(buf, len(members), numel * _element_size(dtype) // 8)
            _add_batch(members, buf, colsums, consts, hashes, probes)
        else:
            padded.setdefault(dtype, []).extend(members)
    for dtype, members in padded.items():
        per_row = 8 * COLS // _element_size(dtype)
        rows = {i: -(-flats[i].numel() // per_row) for i in members}
        members.sort(key=rows.__getitem__)
        pieces: list[torch.Tensor] = []
        for i in members:
            pieces.append(flats[i])
            pad = rows[i] * per_row - flats[i].numel()
            if pad:
                pieces.append(consts.zeros(dtype, pad))
        buf = _concatenated(pieces)
        words = buf.view(torch.int64).view(-1, COLS)
        blocks: list[torch.Tensor] = []
        start = 0
        for count, group in itertools.groupby(members, key=rows.__getitem__):
            n = len(list(group))
            blocks.append(words[start : start + n * count].view(n, count, COLS).sum(1))
            start += n * count
        _add_batch(members, buf, torch.cat(blocks), consts, hashes, probes)


_scratch = threading.local()
"""Per thread, the CPU buffer batches are concatenated into: a fresh one is page-faulted in
on every batch (a 2 MB `torch.cat` costs ten times a copy into memory already mapped)."""


def _concatenated(pieces: list[torch.Tensor], nbytes: int | None = None) -> torch.Tensor:
    """`torch.cat(pieces)` (1-D, one dtype, `nbytes` in all when known); on the CPU into this
    thread's reused buffer, so valid until its next call."""
    if not pieces[0].is_cpu:
        return torch.cat(pieces)
    dtype = pieces[0].dtype
    if nbytes is None:
        nbytes = sum(p.numel() for p in pieces) * _element_size(dtype)
    buffer: torch.Tensor | None = getattr(_scratch, "buffer", None)
    if buffer is None or buffer.numel() < nbytes:
        buffer = _scratch.buffer = torch.empty(
            max(nbytes, 8 * _BATCH_WORDS["cpu"]), dtype=torch.uint8
        )
    return torch.cat(pieces, out=buffer[:nbytes].view(dtype))


def _alike_colsums(buf: torch.Tensor, count: int, words: int) -> torch.Tensor:
    """Column sums of `count` tensors of `words` words each, back to back in `buf`."""
    flat = buf.view(torch.int64)
    rows, rest = divmod(words, COLS)
    if rows:
        colsums = flat.as_strided((count, rows, COLS), (words, COLS, 1)).sum(1)
    else:
        colsums = torch.zeros(count, COLS, dtype=torch.int64, device=buf.device)
    if rest:
        colsums[:, :rest] += flat.as_strided((count, rest), (words, 1), rows * COLS)
    return colsums


def _add_batch(
    members: list[int],
    buf: torch.Tensor,
    colsums: torch.Tensor,
    consts: _Constants,
    hashes: Results,
    probes: Results,
) -> None:
    """The hashes of `members` from their column sums, and the probe of their values."""
    hashes.add(members, _weighted(colsums, consts.columns) * consts.chunks(1))
    values, acc = stat_view(buf)
    if values is None or acc is None or acc == torch.int64:
        return
    if values.dtype not in FLOATS:
        values = values.to(acc)
    probes.add(members, values.sum(dtype=acc).to(torch.float64).expand(len(members)))


@functools.cache
def _element_size(dtype: torch.dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


def small_batches(
    indices: list[int], flats: list[torch.Tensor], device: str, words: list[int] | None = None
) -> list[list[int]]:
    """Groups of small tensors whose words together stay under the batch size (`words`: each
    index's `padded_words`, when the caller has them)."""
    limit = _BATCH_WORDS["cpu" if device == "cpu" else "cuda"]
    if words is None:
        words = [padded_words(flats[i]) for i in indices]
    out: list[list[int]] = []
    total = 0
    for i, n in zip(indices, words, strict=True):
        if not out or total + n > limit:
            out.append([])
            total = 0
        out[-1].append(i)
        total += n
    return out


def padded_words(flat: torch.Tensor) -> int:
    return -(-flat.numel() * flat.element_size() // 8)


def words_of(dtype: torch.dtype, numel: int) -> int:
    """`padded_words` of a tensor of `numel` elements of `dtype`."""
    return -(-numel * _element_size(dtype) // 8)


def _tail_word(tail: torch.Tensor) -> torch.Tensor:
    """The last nbytes % 8 bytes, zero-padded into one little-endian int64 word."""
    padded = torch.nn.functional.pad(tail, (0, 8 - tail.numel()))
    return padded.view(torch.int64)


def _words(flat: torch.Tensor, consts: _Constants) -> tuple[torch.Tensor, torch.Tensor]:
    """The bytes as int64 words, plus the last nbytes % 8 bytes as uint8."""
    size = flat.element_size()
    if flat.storage_offset() * size % 8:
        flat = flat.clone()  # a view starting mid-word: realign on the same device
    elif flat.numel() * size % 8 == 0 and flat.dtype != torch.bool:
        return flat.view(torch.int64), consts.no_tail  # whole words: one view
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
        self._zeros: dict[tuple[torch.dtype, int], torch.Tensor] = {}
        self.zero = torch.zeros((), dtype=torch.float64, device=device)
        self.no_tail = torch.zeros(0, dtype=torch.uint8, device=device)
        self._chunk_table = torch.empty(0, dtype=torch.int64, device=device)
        self._device = device

    def zeros(self, dtype: torch.dtype, n: int) -> torch.Tensor:
        """`n` zeros of `dtype` (kept: a batch of alike tensors pads each alike)."""
        found = self._zeros.get((dtype, n))
        if found is None:
            if len(self._zeros) >= 1024:
                self._zeros.clear()
            found = self._zeros[(dtype, n)] = torch.zeros(n, dtype=dtype, device=self._device)
        return found

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

    def columns(self) -> tuple[list[int], list[Any]]:
        """The indices and the values of everything added, fetched as `items` does."""
        indices: list[int] = []
        values: list[Any] = []
        for parts in self._parts.values():
            values += torch.cat([v for _, v in parts]).tolist()
            indices += [i for idx, _ in parts for i in idx]
        return indices, values

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
