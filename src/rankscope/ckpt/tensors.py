"""Tensor arithmetic of a conversion: fuse/split q-k-v and gate-up, split/merge TP shards.

Pure functions over torch tensors; every result is a view or a fresh contiguous tensor, and
splitting then merging gives back the same bytes.
"""

from __future__ import annotations

import torch

from rankscope.ckpt.mapping import Fuse, TpSplit
from rankscope.ckpt.model import ModelDims

__all__ = ["fuse", "merge_tp", "same_bytes", "split_fused", "split_sizes", "split_tp"]


def fuse(parts: list[torch.Tensor], kind: Fuse, dims: ModelDims) -> torch.Tensor:
    """HuggingFace tensors -> one Megatron-core tensor."""
    if kind is Fuse.COPY:
        return parts[0]
    if kind is Fuse.GATE_UP:
        return torch.cat(parts, dim=0)
    q, k, v = parts
    groups, per_group, hd = dims.kv_heads, dims.heads // dims.kv_heads, dims.head_dim
    rest = q.shape[1:]
    grouped = [
        q.reshape(groups, per_group * hd, *rest),
        k.reshape(groups, hd, *rest),
        v.reshape(groups, hd, *rest),
    ]
    return torch.cat(grouped, dim=1).reshape(groups * (per_group + 2) * hd, *rest)


def split_fused(tensor: torch.Tensor, kind: Fuse, dims: ModelDims) -> list[torch.Tensor]:
    """One Megatron-core tensor -> its HuggingFace tensors (inverse of `fuse`)."""
    if kind is Fuse.COPY:
        return [tensor]
    if kind is Fuse.GATE_UP:
        return [t.contiguous() for t in torch.chunk(tensor, 2, dim=0)]
    groups, per_group, hd = dims.kv_heads, dims.heads // dims.kv_heads, dims.head_dim
    rest = tensor.shape[1:]
    grouped = tensor.reshape(groups, (per_group + 2) * hd, *rest)
    q, k, v = torch.split(grouped, [per_group * hd, hd, hd], dim=1)
    return [
        q.reshape(groups * per_group * hd, *rest).contiguous(),
        k.reshape(groups * hd, *rest).contiguous(),
        v.reshape(groups * hd, *rest).contiguous(),
    ]


def split_tp(tensor: torch.Tensor, kind: TpSplit, tp: int) -> list[torch.Tensor]:
    """The `tp` pieces Megatron-core ranks hold of `tensor`."""
    if kind is TpSplit.REPLICATED or tp == 1:
        return [tensor] * tp
    if kind is TpSplit.GATE_UP:
        gate, up = torch.chunk(tensor, 2, dim=0)
        return [
            torch.cat([g, u], dim=0)
            for g, u in zip(torch.chunk(gate, tp, dim=0), torch.chunk(up, tp, dim=0), strict=True)
        ]
    dim = 0 if kind is TpSplit.COLUMN else 1
    return [t.contiguous() for t in torch.chunk(tensor, tp, dim=dim)]


def merge_tp(pieces: list[torch.Tensor], kind: TpSplit) -> torch.Tensor:
    """Inverse of `split_tp`; replicated pieces must be identical."""
    if len(pieces) == 1:
        return pieces[0]
    if kind is TpSplit.REPLICATED:
        first = pieces[0]
        for p in pieces[1:]:
            if not same_bytes(p, first):
                raise ValueError("replicated tensor differs between tensor-parallel ranks")
        return first
    if kind is TpSplit.GATE_UP:
        halves = [torch.chunk(p, 2, dim=0) for p in pieces]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=0)
    return torch.cat(pieces, dim=0 if kind is TpSplit.COLUMN else 1)


def split_sizes(shape: tuple[int, ...], kind: TpSplit, tp: int) -> tuple[int, ...]:
    """The shape of one rank's piece of a tensor of `shape` (sizes must divide)."""
    if kind is TpSplit.REPLICATED:
        return shape
    dim = 1 if kind is TpSplit.ROW else 0
    return (*shape[:dim], shape[dim] // tp, *shape[dim + 1 :])


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-exact equality (NaNs and signed zeros included)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(_bytes(a), _bytes(b))


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)
