"""A `torch_dist` checkpoint as rankscope's readers see it: per-layer names, global shapes.

Megatron stacks layers (`decoder.layers.mlp.linear_fc2.weight`: `[layers, hidden, ffn]`); the
manifest and the tensor source unstack them into `decoder.layers.N.mlp.linear_fc2.weight` with
the per-layer global (all tensor-parallel ranks merged) shape, the names Megatron's
`state_dict()` uses, so `diff` and `convert` treat them like any Megatron-core checkpoint.

Example: `dist_manifest("iter_0000100").tensors["decoder.layers.0.mlp.linear_fc2.weight"]`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from rankscope.ckpt.megatron.dist_meta import DistMetadata, read_dist_metadata
from rankscope.ckpt.megatron.dist_reader import DistReader
from rankscope.ckpt.model import Manifest, SourceKind, TensorInfo
from rankscope.ckpt.tensor_source import TensorSource

if TYPE_CHECKING:
    import torch

__all__ = ["DistTensorSource", "dist_manifest"]

_STACKED = re.compile(r"^decoder\.layers\.(?!\d+\.)(.+)$")
_CODE = {
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "float64": "F64",
    "int64": "I64",
    "int32": "I32",
    "int8": "I8",
    "uint8": "U8",
    "bool": "BOOL",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
}


_EXPERTS = re.compile(r"^decoder\.layers\.mlp\.experts\.experts\.(.+)$")

Where = tuple[str, int | None, int | None, TensorInfo]
"""(stacked key, layer, expert, per-layer info) of one unstacked name."""


def _unstacked(meta: DistMetadata) -> dict[str, Where]:
    """{per-layer (and per-expert) name: where it lives}, in checkpoint order."""
    out: dict[str, Where] = {}
    for key, t in meta.tensors.items():
        dtype = _CODE.get(t.dtype, t.dtype.upper())
        file = t.chunks[0].file if t.chunks else ""
        m, x = _STACKED.match(key), _EXPERTS.match(key)
        if x and len(t.shape) >= 3:
            for layer in range(t.shape[0]):
                for e in range(t.shape[1]):
                    name = f"decoder.layers.{layer}.mlp.experts.local_experts.{e}.{x.group(1)}"
                    out[name] = (key, layer, e, TensorInfo(name, t.shape[2:], dtype, file))
        elif m and len(t.shape) >= 2:
            for layer in range(t.shape[0]):
                name = f"decoder.layers.{layer}.{m.group(1)}"
                out[name] = (key, layer, None, TensorInfo(name, t.shape[1:], dtype, file))
        else:
            out[key] = (key, None, None, TensorInfo(key, t.shape, dtype, file))
    return out


def dist_manifest(folder: str) -> Manifest:
    """Every tensor (layers unstacked) from `.metadata` alone; `_extra_state` objects apart."""
    meta = read_dist_metadata(folder)
    tensors = {n: w[3] for n, w in _unstacked(meta).items()}
    extra = [k for k in meta.objects if "_extra_state" in k]
    layers = {t.shape[0] for k, t in meta.tensors.items() if _STACKED.match(k) and t.shape}
    return Manifest(
        source=folder,
        kind=SourceKind.MCORE_DIST,
        tensors=tensors,
        files=tuple(f"{folder}/{f}" for f in meta.files),
        metadata={
            "megatron.backend": meta.backend,
            "megatron.layers_stacked": str(max(layers) if layers else 0),
        },
        extra_state=extra,
        other_objects=[k for k in meta.objects if "_extra_state" not in k],
    )


class DistTensorSource(TensorSource):
    """Per-layer tensors of a `torch_dist` folder, read one region at a time."""

    def __init__(self, folder: str) -> None:
        meta = read_dist_metadata(folder)
        self._where = _unstacked(meta)
        super().__init__(folder, {n: w[3] for n, w in self._where.items()}, {})
        self._reader = DistReader(meta)

    def get(self, name: str) -> torch.Tensor:
        key, layer, expert, info = self._where[name]
        if expert is not None and layer is not None:
            zero = (0,) * len(info.shape)
            return self._reader.region(key, (layer, expert, *zero), (1, 1, *info.shape))[0, 0]
        return self._reader.full(key) if layer is None else self._reader.layer(key, layer)

    def handle(self, name: str) -> Any:
        raise NotImplementedError("torch_dist tensors are read by region")
