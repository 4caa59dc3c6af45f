"""Reading tensors of a `torch_dist` checkpoint region by region, on CPU, without Megatron.

Each chunk `.metadata` lists is one `torch.save` record at (offset, length) in a `.distcp` file;
it is read with `torch.load(weights_only=True)` (tensors only, no code). A region (one layer of a
stacked tensor, or a whole unstacked tensor) is assembled from the chunks that overlap it, one
chunk in memory at a time, whatever grid of tensor- and pipeline-parallel ranks wrote them.

Example: `DistReader(read_dist_metadata(folder)).layer("decoder.layers.mlp.linear_fc2.weight", 0)`.
"""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING

from rankscope.ckpt.megatron.dist_meta import DistChunk, DistMetadata
from rankscope.errors import CheckpointError

if TYPE_CHECKING:
    import torch

__all__ = ["DistReader"]


class DistReader:
    """Regions of the tensors of one `torch_dist` folder."""

    def __init__(self, meta: DistMetadata) -> None:
        self.meta = meta

    def full(self, key: str) -> torch.Tensor:
        """The whole tensor `key` (global shape)."""
        shape = self._tensor(key).shape
        return self.region(key, (0,) * len(shape), shape)

    def layer(self, key: str, layer: int) -> torch.Tensor:
        """Layer `layer` of a stacked tensor (leading axis dropped)."""
        shape = self._tensor(key).shape
        if not shape or not 0 <= layer < shape[0]:
            raise CheckpointError(f"{self.meta.folder}: {key} {list(shape)} has no layer {layer}")
        return self.region(key, (layer,) + (0,) * (len(shape) - 1), (1, *shape[1:]))[0]

    def region(self, key: str, offsets: tuple[int, ...], sizes: tuple[int, ...]) -> torch.Tensor:
        import torch

        info = self._tensor(key)
        out = torch.empty(sizes, dtype=getattr(torch, info.dtype))
        covered = 0
        for chunk in info.chunks:
            inter = _overlap(offsets, sizes, chunk.offsets, chunk.sizes)
            if inter is None:
                continue
            data = self._load(key, chunk)
            src = tuple(slice(a - c, b - c) for (a, b), c in zip(inter, chunk.offsets, strict=True))
            dst = tuple(slice(a - o, b - o) for (a, b), o in zip(inter, offsets, strict=True))
            out[dst] = data[src]
            covered += _volume(inter)
        if covered != _volume(tuple((o, o + s) for o, s in zip(offsets, sizes, strict=True))):
            raise CheckpointError(
                f"{self.meta.folder}: the chunks of {key} do not cover {list(sizes)} at "
                f"{list(offsets)}: a rank's shard is missing from .metadata"
            )
        return out

    def _tensor(self, key: str):  # type: ignore[no-untyped-def]
        try:
            return self.meta.tensors[key]
        except KeyError:
            raise CheckpointError(f"{self.meta.folder}: no tensor {key}") from None

    def _load(self, key: str, chunk: DistChunk) -> torch.Tensor:
        import pickle

        import torch

        path = os.path.join(self.meta.folder, chunk.file)
        try:
            with open(path, "rb") as f:
                f.seek(chunk.offset)
                raw = f.read(chunk.length)
            if len(raw) != chunk.length:
                raise CheckpointError(f"{path}: truncated: {key} needs bytes past the end")
            data = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
            raise CheckpointError(
                f"{path}: {key}: not a readable tensor record ({first})"
            ) from None
        except OSError as exc:
            raise CheckpointError(f"{path}: cannot read: {exc.strerror or exc}") from None
        if not isinstance(data, torch.Tensor) or tuple(data.shape) != chunk.sizes:
            raise CheckpointError(f"{path}: {key}: the chunk is not a {list(chunk.sizes)} tensor")
        return data


def _overlap(
    o1: tuple[int, ...], s1: tuple[int, ...], o2: tuple[int, ...], s2: tuple[int, ...]
) -> tuple[tuple[int, int], ...] | None:
    out = []
    for a, n, b, m in zip(o1, s1, o2, s2, strict=True):
        lo, hi = max(a, b), min(a + n, b + m)
        if lo >= hi:
            return None
        out.append((lo, hi))
    return tuple(out)


def _volume(box: tuple[tuple[int, int], ...]) -> int:
    n = 1
    for lo, hi in box:
        n *= hi - lo
    return n
