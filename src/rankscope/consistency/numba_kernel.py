"""The jitted loop of `cpu_hash` (imported only where numba is installed).

Type-checked by numba when compiled, not by mypy (see pyproject).

`scan` is `torch_hash.scan_tensor`'s checksum written as one loop over a tensor's memory, read in
place through its address, plus the exponent probe described in `cpu_hash`.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

from rankscope.consistency.torch_hash import CHUNK_ADD, CHUNK_MUL, CHUNK_WORDS, COLS

_MUL = np.uint64(CHUNK_MUL)
_ADD = np.uint64(CHUNK_ADD)
_ONE = np.uint64(1)


def _address_as(element: Any) -> Any:
    """An intrinsic that reads an int64 address as a pointer to `element`s."""
    pointer = types.CPointer(element)

    @intrinsic
    def cast(typingctx: Any, address: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            return builder.inttoptr(args[0], context.get_value_type(pointer))

        return pointer(types.int64), codegen

    return cast


_words_at = _address_as(types.uint64)
"""A tensor's first byte as a pointer to 64-bit words."""
_bytes_at = _address_as(types.uint8)
"""An address as a pointer to bytes (for the last partial word)."""


@numba.njit(nogil=True, cache=True, boundscheck=False)
def scan(addresses, sizes, firsts, lasts, columns, exponents, lowests, out):
    """Checksum and probe of base chunks firsts[i]..lasts[i]-1 of tensor i, into out[i].

    Tensor i is `sizes[i]` contiguous bytes at `addresses[i]` (8-byte aligned); its last
    `sizes[i] % 8` bytes count as one zero-padded little-endian word.
    """
    acc = np.zeros(COLS, np.uint64)  # one scratch row for all: small tensors come by thousands
    for i in range(addresses.size):
        out[i, 0], out[i, 1] = _scan_one(
            addresses[i], sizes[i], firsts[i], lasts[i], columns, exponents[i], lowests[i], acc
        )


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _scan_one(address, size, first, last, columns, exponent, lowest, acc):
    # Loops written as the compiler vectorizes them best (measured): all in one function,
    # counting chunks from 0 over a view that starts at chunk `first`. Only the columns a
    # chunk reaches are cleared and weighted (a small tensor reaches few).
    offset = first * CHUNK_WORDS
    full = max(0, min(size // 8, last * CHUNK_WORDS) - offset)
    words = numba.carray(_words_at(address + 8 * offset), (full,))
    tail = size % 8 if size // 8 < last * CHUNK_WORDS else 0
    checksum = np.uint64(0)
    probe = np.uint64(0)
    for k in range((full + (tail > 0) + CHUNK_WORDS - 1) // CHUNK_WORDS):
        start = k * CHUNK_WORDS
        end = min(start + CHUNK_WORDS, full)
        used = min(COLS, end - start + (tail > 0))
        acc[:used] = 0
        j = start
        while j + 4 * COLS <= end:  # four rows a pass: a quarter of the updates of `acc`
            for c in range(COLS):
                a = words[j + c]
                b = words[j + COLS + c]
                d = words[j + 2 * COLS + c]
                e = words[j + 3 * COLS + c]
                acc[c] += (a + b) + (d + e)
                probe |= (((a & exponent) + lowest) | ((b & exponent) + lowest)) | (
                    ((d & exponent) + lowest) | ((e & exponent) + lowest)
                )
            j += 4 * COLS
        if j + 2 * COLS <= end:  # two rows (a small tensor has too few for four)
            for c in range(COLS):
                a = words[j + c]
                b = words[j + COLS + c]
                acc[c] += a + b
                probe |= ((a & exponent) + lowest) | ((b & exponent) + lowest)
            j += 2 * COLS
        while j < end:
            for c in range(min(COLS, end - j)):
                v = words[j + c]
                acc[c] += v
                probe |= (v & exponent) + lowest
            j += COLS
        if tail and start <= full < start + CHUNK_WORDS:
            rest = numba.carray(_bytes_at(address + 8 * (offset + full)), (tail,))
            v = np.uint64(0)
            for b in range(tail):
                v |= np.uint64(rest[b]) << np.uint64(8 * b)
            acc[full % COLS] += v
            probe |= (v & exponent) + lowest
        weighted = np.uint64(0)
        for c in range(used):
            weighted += acc[c] * columns[c]
        checksum += weighted * ((np.uint64(first + k) * _MUL + _ADD) | _ONE)
    return checksum, probe
