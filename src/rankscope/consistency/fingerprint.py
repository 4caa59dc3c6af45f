"""Fingerprints computed where a tensor lives: torch ops on its own device, no host copy.

Holds the public functions (`fingerprint_tensors`, `summarize_tensors`, `difference`,
`describe`, `dtype_name`) and how they prepare a tensor (a DTensor's local shard, flat and
row-major). The hash itself is computed by `cpu_hash` (CPU tensors: one read of their memory,
numba) or by the torch ops of `torch_hash` (any other device, and the CPU without numba),
which also defines it; both give the same hash.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache

import numpy as np
import torch

from rankscope.consistency import cpu_hash
from rankscope.consistency.model import Difference, Fingerprint, Summary, TensorStats
from rankscope.consistency.torch_hash import (
    FLOATS,
    INTEGERS,
    SMALL_WORDS,
    Results,
    avalanche,
    hash_batch,
    scan_tensor,
    small_batches,
    stat_view,
    words_of,
)


@cache
def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def fingerprint_tensors(items: Sequence[tuple[str, torch.Tensor]]) -> list[Fingerprint]:
    """Hash and NaN/Inf counts of each tensor; one transfer to the host per device.

    CPU tensors go through the kernel all at once. Elsewhere small tensors are hashed together
    in batches (a handful of torch ops per batch rather than per tensor), large ones chunk by
    chunk. Example: `fingerprint_tensors([("w", model.weight)])[0].hash`.
    """
    tensors = [t if type(t) in _PLAIN else _local(t) for _, t in items]
    devices: list[str] = []
    checksums = np.zeros(len(items), dtype=np.uint64)
    suspects = np.zeros(len(items), dtype=bool)
    on_host: list[int] = []
    on_device: dict[str, list[int]] = {}
    kernel = cpu_hash.available()
    known, strided = cpu_hash.PROBES, torch.strided
    starts: list[int] = []
    sizes: list[int] = []
    dtypes: list[torch.dtype] = []
    for i, t in enumerate(tensors):  # per tensor: a few attribute reads (thousands of tensors)
        if not t.is_cpu:
            devices.append(str(t.device))
            on_device.setdefault(devices[i], []).append(i)
            continue
        devices.append("cpu")
        dtype = t.dtype
        if kernel and dtype in known and t.layout == strided:
            on_host.append(i)
            start = t.data_ptr()
            if start % 8 or not t.is_contiguous() or t.is_conj() or t.is_neg():
                flat = _flat(t)  # a strided, conjugate or misaligned view: a fresh copy
                t = tensors[i] = flat if _in_place(flat) else flat.clone()
                start = t.data_ptr()
            starts.append(start)
            sizes.append(t.nbytes)
            dtypes.append(dtype)
        else:
            on_device.setdefault("cpu", []).append(i)
    if on_host:  # the kernel reads `tensors`' memory, which they keep alive meanwhile
        checksums[on_host], suspects[on_host] = cpu_hash.hash_memory(starts, sizes, dtypes)
    hashes, probes = Results(), Results()
    for device, indices in on_device.items():
        small: list[int] = []
        words: list[int] = []
        kinds: dict[int, tuple[torch.dtype, int]] = {}
        for i in indices:
            flat = tensors[i] = _flat(tensors[i])
            kind = kinds[i] = (flat.dtype, flat.numel())
            n = words_of(*kind)
            if n <= SMALL_WORDS:
                small.append(i)
                words.append(n)
            else:
                scan = scan_tensor(flat)
                hashes.add([i], scan.hash.view(1))
                probes.add([i], scan.probe.view(1))
        for batch in small_batches(small, tensors, device, words):
            hash_batch(batch, tensors, hashes, probes, kinds)
    indices, values = hashes.columns()
    if indices:  # the int64 sums' bits, as the unsigned checksums they are
        checksums[indices] = np.array(values, dtype=np.int64).view(np.uint64)
    indices, values = probes.columns()
    if indices:
        suspects[indices] = ~np.isfinite(np.array(values, dtype=np.float64))
    counts = _nonfinite_counts(tensors, suspects.tolist())
    mixed = avalanche(checksums).tolist()
    return [
        Fingerprint(
            name, tuple(t.shape), dtype_name(t.dtype), mixed[i], *counts.get(i, (0, 0)), devices[i]
        )
        for i, (name, t) in enumerate(items)
    ]


def summarize_tensors(items: Sequence[tuple[str, torch.Tensor]]) -> dict[str, Summary]:
    """Sum, sum of squares, min, max and NaN/Inf counts of each tensor, computed in place."""
    flats = [_flat(t) for _, t in items]
    stats = Results()
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


# ------------------------------------------------------------------------------- preparing
def _summary(flat: torch.Tensor) -> torch.Tensor:
    """(4,) float64 on the device: sum, sum of squares, min, max (NaN min/max when empty)."""
    f64 = torch.float64
    values, acc = stat_view(flat)
    if values is None or acc is None or values.numel() == 0:
        nan = math.nan
        return torch.tensor([0.0, 0.0, nan, nan], dtype=f64, device=flat.device)
    if values.dtype not in FLOATS and values.dtype not in INTEGERS:
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


_PLAIN = (torch.Tensor, torch.nn.Parameter)
"""Types that are their own local part (checked first: a failed `to_local` lookup costs µs)."""


def _local(t: torch.Tensor) -> torch.Tensor:
    """This rank's part: a DTensor's local shard, any other tensor as it is."""
    if type(t) in _PLAIN:
        return t
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def _in_place(t: torch.Tensor) -> bool:
    """Whether the kernel can read `t`'s memory as it is (else it reads a contiguous copy)."""
    return t.is_contiguous() and not t.is_conj() and not t.is_neg() and t.data_ptr() % 8 == 0


def _flat(t: torch.Tensor) -> torch.Tensor:
    """Detached, contiguous, 1-D, row-major: strides never change the hash, only values do.

    Conjugate and negative views are resolved first, so the bytes hashed are the values. A
    tensor that already is all that is returned as it is (no new views: small tensors come
    by the thousand).
    """
    if (
        type(t) in _PLAIN
        and t.dim() == 1
        and t.stride(0) == 1
        and not t.requires_grad
        and not t.is_conj()
        and not t.is_neg()
    ):  # already flat: the common case, checked with the fewest calls
        return t
    t = _local(t)
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    if not t.is_contiguous():
        t = t.contiguous()
    if t.requires_grad:
        t = t.detach()
    if t.dim() == 1 and (t.stride(0) == 1 or t.numel() == 0):
        return t
    return t.as_strided((t.numel(),), (1,))  # not reshape: a one-element view keeps its stride


def _real_view(t: torch.Tensor) -> torch.Tensor:
    """1-D, complex tensors as their (real, imaginary) pairs."""
    t = _flat(t)
    return torch.view_as_real(t).reshape(-1) if t.is_complex() else t


def _as_float(t: torch.Tensor) -> torch.Tensor:
    return _real_view(t).to(torch.float64)


def _nonfinite_counts(
    flats: list[torch.Tensor], suspects: list[bool]
) -> dict[int, tuple[int, int]]:
    """NaN and Inf counts, counted only where a cheaper probe saw a NaN or Inf."""
    counts = Results()
    for i, (t, suspect) in enumerate(zip(flats, suspects, strict=True)):
        if suspect and (t.is_floating_point() or t.is_complex()):
            counts.add([i], torch.stack([t.isnan().sum(), t.isinf().sum()]).view(1, 2))
    return {i: (int(nan), int(inf)) for i, (nan, inf) in counts.items()}
