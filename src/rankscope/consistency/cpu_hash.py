"""The fingerprint of CPU tensors in one read of their memory: a numba kernel.

Eager PyTorch needs two passes over a tensor (an int64 reduction for the checksum, a float
reduction to notice NaN/Inf) and its column reduction over 1021-word rows runs well below
memory speed. This kernel computes the very same checksum as `torch_hash.scan_tensor` (so CPU and
GPU ranks agree) and, in the same loop, a probe of the floating-point exponent bits: for each
element `(bits & exponent) + lowest exponent bit` carries into the sign bit exactly when the
exponent is all ones (NaN or Inf), so OR-ing those sums over the tensor says whether to count.

numba is optional (the `torch` extra brings it); without it `available()` is False and the
fingerprint uses torch ops, with the same hashes.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import torch

from rankscope.consistency.torch_hash import CHUNK_WORDS, column_weights


@dataclass(frozen=True)
class ExponentProbe:
    """Bit masks that find all-ones exponents in the 64-bit words of one float dtype."""

    exponent: int
    lowest: int
    signs: int


def _probe(width: int, exponent: int, lowest: int) -> ExponentProbe:
    lanes = 64 // width
    sign = 1 << (width - 1)
    spread = sum(1 << (width * i) for i in range(lanes))
    return ExponentProbe(exponent * spread, lowest * spread, sign * spread)


_NO_PROBE = ExponentProbe(0, 0, 0)
PROBES: dict[torch.dtype, ExponentProbe] = {
    torch.float64: _probe(64, 0x7FF0_0000_0000_0000, 0x0010_0000_0000_0000),
    torch.float32: _probe(32, 0x7F80_0000, 0x0080_0000),
    torch.float16: _probe(16, 0x7C00, 0x0400),
    torch.bfloat16: _probe(16, 0x7F80, 0x0080),
    torch.complex128: _probe(64, 0x7FF0_0000_0000_0000, 0x0010_0000_0000_0000),
    torch.complex64: _probe(32, 0x7F80_0000, 0x0080_0000),
    torch.complex32: _probe(16, 0x7C00, 0x0400),
    **{
        getattr(torch, name): _NO_PROBE
        for name in (
            "bool",
            "uint8",
            "int8",
            "int16",
            "int32",
            "int64",
            "uint16",
            "uint32",
            "uint64",
        )
        if hasattr(torch, name)  # unsigned 16-64 bit dtypes since torch 2.3
    },
}
"""Dtypes the kernel handles: floats whose NaN/Inf have an all-ones exponent, and integers."""


@cache
def _kernels() -> Any:
    """The jitted module (compiled, or loaded from numba's cache, on first use), or None."""
    try:
        from rankscope.consistency import numba_kernel
    except ImportError:
        return None
    return numba_kernel


@cache
def available() -> bool:
    """Whether the kernel runs here: numba importable, and the kernel compiled or cached."""
    try:
        if _kernels() is None:
            return False
        hash_tensors([torch.zeros(3, dtype=torch.float16)])
        return True
    except Exception:  # a numba that cannot compile here: the torch path gives the same hashes
        return False


_MAX_THREADS = 8
_BYTES_PER_THREAD = 4 << 20
"""Less work than this per thread is done on the calling thread alone."""
_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _forget_workers() -> None:
    """In a forked child the pool's threads are gone: start a new pool there when needed."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_workers)


def _workers() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=_MAX_THREADS, thread_name_prefix="rankscope-fingerprint"
            )
        return _pool


def hash_tensors(tensors: Sequence[torch.Tensor]) -> tuple[np.ndarray, np.ndarray]:
    """Checksums (uint64) of CPU tensors, and whether each may hold a NaN or Inf.

    Each tensor must be contiguous, start on an 8-byte boundary and have a dtype in `PROBES`;
    the kernel reads its memory in place. The work is cut into runs of whole chunks spread over
    as many threads as torch uses, since one core cannot read memory as fast as several.
    """
    return hash_memory(
        [t.data_ptr() for t in tensors], [t.nbytes for t in tensors], [t.dtype for t in tensors]
    )


def hash_memory(
    starts: Sequence[int], nbytes: Sequence[int], dtypes: Sequence[torch.dtype]
) -> tuple[np.ndarray, np.ndarray]:
    """`hash_tensors` of tensors given by address, size and dtype (read once by the caller,
    who keeps the tensors alive until this returns)."""
    kernels = _kernels()
    assert kernels is not None
    count = len(starts)
    probes = [PROBES[d] for d in dtypes]
    sizes = np.asarray(nbytes, dtype=np.int64)
    addresses = np.asarray(starts, dtype=np.int64)
    chunk_bytes = 8 * CHUNK_WORDS
    chunks = -(-sizes // chunk_bytes)
    threads = max(1, min(torch.get_num_threads(), _MAX_THREADS))
    piece = max(1, -(-int(chunks.sum()) // (4 * threads)))
    # Work items: each tensor cut into runs of `piece` chunks (one item if it is small).
    pieces = np.maximum(1, -(-chunks // piece))
    owners = np.repeat(np.arange(count), pieces)
    firsts = (np.arange(len(owners)) - np.repeat(np.cumsum(pieces) - pieces, pieces)) * piece
    lasts = np.minimum(firsts + piece, chunks[owners])
    item = (addresses[owners], sizes[owners], firsts, lasts)
    exponents = np.asarray([p.exponent for p in probes], dtype=np.uint64)[owners]
    lowests = np.asarray([p.lowest for p in probes], dtype=np.uint64)[owners]
    out = np.zeros((len(owners), 2), dtype=np.uint64)
    weights = _columns()

    def run(lo: int, hi: int) -> None:
        kernels.scan(
            *(c[lo:hi] for c in item), weights, exponents[lo:hi], lowests[lo:hi], out[lo:hi]
        )

    item_bytes = np.minimum(item[1], chunk_bytes * lasts) - np.minimum(
        item[1], chunk_bytes * firsts
    )
    parts = min(threads, 1 + int(item_bytes.sum()) // _BYTES_PER_THREAD)
    bounds = _balanced(item_bytes, parts)
    futures = [_workers().submit(run, lo, hi) for lo, hi in bounds[1:]]
    try:
        run(*bounds[0])
    finally:  # never return (and let the tensors go) while a worker still reads them
        wait(futures)
    for future in futures:
        future.result()
    if len(owners) == count:  # one item each (small tensors): no `ufunc.at`, slow
        checksums, found = out[:, 0], out[:, 1]
    else:
        checksums = np.zeros(count, dtype=np.uint64)
        found = np.zeros(count, dtype=np.uint64)
        np.add.at(checksums, owners, out[:, 0])
        np.bitwise_or.at(found, owners, out[:, 1])
    signs = np.asarray([p.signs for p in probes], dtype=np.uint64)
    return checksums, (found & signs) != 0


def _balanced(weights: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """Cut a list of work items into at most `parts` runs of about equal total weight."""
    if len(weights) == 0:
        return [(0, 0)]
    total = np.cumsum(weights)
    cuts = np.searchsorted(total, total[-1] * np.arange(1, parts) / parts, side="right")
    edges = sorted({0, *cuts.tolist(), len(weights)})
    return list(itertools.pairwise(edges))


@cache
def _columns() -> np.ndarray:
    return column_weights().numpy().view(np.uint64)
