"""`rankscope comm-bench`'s numbers: bus bandwidth as nccl-tests defines it, and the slow pair.

Pure. nccl-tests' definitions (doc/PERFORMANCE.md there): algbw = bytes / time; all_reduce
busbw = algbw * 2(n-1)/n; all_gather busbw = algbw * (n-1)/n with bytes the total output size.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["CollectiveBandwidth", "CommBench", "PairLink", "bus_bandwidth", "message_sizes"]

SLOW_PAIR_FACTOR = 2.0


@dataclass(frozen=True)
class CollectiveBandwidth:
    op: str
    bytes: int
    """all_reduce: the buffer; all_gather: the total output (n x each rank's input)."""
    time_s: float
    """Median time of one call."""
    algbw_gbs: float
    busbw_gbs: float


@dataclass(frozen=True)
class PairLink:
    """send/recv between the ranks on two nodes."""

    a: str
    b: str
    latency_s: float
    """Half the round trip of a 1 KB message."""
    bandwidth_gbs: float
    """One-way bytes / time of the largest message."""


@dataclass(frozen=True)
class CommBench:
    backend: str
    nodes: tuple[str, ...]
    collectives: tuple[CollectiveBandwidth, ...]
    pairs: tuple[PairLink, ...]
    slow_pairs: tuple[str, ...]
    """Pairs over 2x slower than the median pair (latency or bandwidth), in words."""
    note: str = ""
    """E.g. that it shared the nodes with a live job (--live)."""


def bus_bandwidth(op: str, nbytes: int, seconds: float, n: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s. Example: `bus_bandwidth("all_reduce", 1 << 30, 1.0, 2)`."""
    if seconds <= 0 or n < 1:
        return 0.0, 0.0
    algbw = nbytes / seconds / 1e9
    factor = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n}[op]
    return algbw, algbw * factor


def message_sizes(smallest: int = 1 << 10, largest: int = 256 << 20) -> list[int]:
    """1 KB, 4 KB, ... 256 MB: powers of 4."""
    sizes, size = [], smallest
    while size <= largest:
        sizes.append(size)
        size *= 4
    return sizes


def slow_pairs(pairs: Sequence[PairLink], factor: float = SLOW_PAIR_FACTOR) -> list[str]:
    """Pairs whose latency is over `factor` x the median pair's, or bandwidth under 1/factor."""
    if len(pairs) < 3:  # with one or two pairs, there is no "usual" pair to compare with
        return []
    lat = statistics.median(p.latency_s for p in pairs)
    bw = statistics.median(p.bandwidth_gbs for p in pairs)
    out = []
    for p in pairs:
        if p.latency_s > factor * lat:
            out.append(f"{p.a} <-> {p.b}: latency {p.latency_s * 1e6:.0f} us, "
                       f"{p.latency_s / lat:.1f}x the median pair")  # fmt: skip
        elif bw > 0 and p.bandwidth_gbs < bw / factor:
            out.append(f"{p.a} <-> {p.b}: {p.bandwidth_gbs:.2f} GB/s, "
                       f"{bw / p.bandwidth_gbs:.1f}x slower than the median pair")  # fmt: skip
    return out
