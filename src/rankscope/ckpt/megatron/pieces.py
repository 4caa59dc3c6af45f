"""One stored chunk of a Megatron tensor, built from HuggingFace tensors by reading only its rows.

A chunk of `linear_fc1` is rows of `gate_proj` or of `up_proj`; a chunk of `linear_qkv` is cut
from the query, key and value rows of the key-value groups it covers, interleaved; a chunk of
the embedding or the output layer past the real vocabulary is zero padding. Rows are read with
safetensors' slices, so building a chunk holds about twice the chunk, never the whole model or
a whole stacked tensor.

Example: `chunk_from_hf(entry, source, dims, offsets, sizes)`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from rankscope.ckpt.mapping import Fuse, TpSplit
from rankscope.ckpt.megatron.layout import DistEntry
from rankscope.ckpt.model import ModelDims

if TYPE_CHECKING:
    import torch

    from rankscope.ckpt.tensor_source import TensorSource

__all__ = ["chunk_from_hf", "read_rows"]


def read_rows(
    source: TensorSource, name: str, start: int, stop: int, cols: tuple[int, int] | None = None
) -> torch.Tensor:
    """Rows `start:stop` (and columns `cols`) of tensor `name`, reading only those bytes."""
    state = source._state
    if name in state:
        tensor: torch.Tensor = state[name][start:stop]
        return tensor[:, cols[0] : cols[1]] if cols else tensor
    handle = source.handle(name)
    sl = handle.get_slice(name)
    if cols:
        result: torch.Tensor = sl[start:stop, cols[0] : cols[1]]
    else:
        result = sl[start:stop]
    return result


def chunk_from_hf(
    entry: DistEntry,
    source: TensorSource,
    dims: ModelDims,
    offsets: tuple[int, ...],
    sizes: tuple[int, ...],
) -> torch.Tensor:
    """The chunk of `entry` at `offsets` with `sizes` (layer axis included when layered)."""
    import torch

    layer = offsets[0] if entry.layered else None
    expert = offsets[1] if entry.per_expert else None
    lead = int(entry.layered) + int(entry.per_expert)
    offsets, sizes = offsets[lead:], sizes[lead:]
    names = [n.format(i=layer, e=expert) for n in entry.rule.hf]
    r0, r1 = offsets[0], offsets[0] + sizes[0]
    cols = (offsets[1], offsets[1] + sizes[1]) if entry.rule.tp is TpSplit.ROW else None
    kind = entry.rule.fuse
    if kind is Fuse.COPY:
        real = source.infos[names[0]].shape[0]
        if r1 <= real:
            out = read_rows(source, names[0], r0, r1, cols)
        else:  # vocabulary padding: zero rows past the tokenizer's vocabulary
            dtype = _torch_dtype(source, names[0])
            out = torch.zeros(sizes, dtype=dtype)
            if r0 < real:
                out[: real - r0] = read_rows(source, names[0], r0, real, cols)
    elif kind is Fuse.GATE_UP:
        half = source.infos[names[0]].shape[0]
        name, base = (names[0], 0) if r0 < half else (names[1], half)
        if r1 - base > half:
            raise ValueError(f"chunk rows {r0}-{r1} of {entry.key} straddle gate and up")
        out = read_rows(source, name, r0 - base, r1 - base)
    else:
        out = _qkv_rows(names, source, dims, r0, r1)
    return out.reshape((1,) * lead + tuple(sizes)).contiguous()


def _qkv_rows(
    names: list[str], source: TensorSource, dims: ModelDims, r0: int, r1: int
) -> torch.Tensor:
    from rankscope.ckpt.tensors import fuse

    per_group = dims.heads // dims.kv_heads
    group_rows = (per_group + 2) * dims.head_dim
    # whole key-value groups that cover the rows; with fewer KV heads than TP ranks a rank's
    # rows are part of one group (Megatron all-gathers and picks its query heads at run time)
    g0, g1 = r0 // group_rows, -(-r1 // group_rows)
    qh, hd = per_group * dims.head_dim, dims.head_dim
    q = read_rows(source, names[0], g0 * qh, g1 * qh)
    k = read_rows(source, names[1], g0 * hd, g1 * hd)
    v = read_rows(source, names[2], g0 * hd, g1 * hd)
    sub = replace(dims, heads=(g1 - g0) * per_group, kv_heads=g1 - g0)
    fused = fuse([q, k, v], Fuse.QKV, sub)
    base = g0 * group_rows
    return fused[r0 - base : r1 - base]


def _torch_dtype(source: TensorSource, name: str) -> torch.dtype:
    from rankscope.ckpt.safetensors_writer import DTYPE_OF_CODE

    code = source.infos[name].dtype or "F32"
    return DTYPE_OF_CODE[code]
