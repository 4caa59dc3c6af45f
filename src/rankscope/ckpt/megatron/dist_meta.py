"""Reading a Megatron-core `torch_dist` checkpoint's metadata without any tensor data.

A `torch_dist` folder holds `metadata.json` (Megatron: which backend wrote it), `common.pt`
(objects that are not sharded), `.metadata` (PyTorch Distributed Checkpoint: every tensor's global
shape, dtype and stored chunks, and where each chunk lies in the `__R_T.distcp` files) and the
`.distcp` files. `.metadata` is a pickle: it is read by `_MetadataUnpickler`, which resolves only
the classes `ALLOWED` names (torch's checkpoint metadata records, torch.Size, dtypes, layouts and
memory formats) and refuses any other global, so reading a hostile file never runs its code.

Example: `read_dist_metadata("ckpt/iter_0000100").tensors["output_layer.weight"].shape`.
"""

from __future__ import annotations

import io
import json
import os
import pickle
from dataclasses import dataclass, field
from typing import Any

from rankscope.errors import CheckpointError

__all__ = [
    "ALLOWED",
    "DistChunk",
    "DistMetadata",
    "DistTensor",
    "is_torch_dist",
    "read_dist_metadata",
]

_DCP = "torch.distributed.checkpoint"
ALLOWED: frozenset[tuple[str, str]] = frozenset(
    [
        (f"{_DCP}.metadata", n)
        for n in (
            "Metadata",
            "TensorStorageMetadata",
            "BytesStorageMetadata",
            "ChunkStorageMetadata",
            "TensorProperties",
            "MetadataIndex",
            "StorageMeta",
            "_MEM_FORMAT_ENCODING",
        )
    ]
    + [(f"{_DCP}.filesystem", "_StorageInfo"), (f"{_DCP}.planner", "WriteItemType")]
    + [("torch", "Size"), ("torch.serialization", "_get_layout"), ("collections", "OrderedDict")]
    + [("pathlib", "PosixPath"), ("pathlib", "Path")]
)
"""(module, name) pairs `.metadata` may name; dtypes (`torch.float32`, ...) are allowed too."""

MAX_METADATA_BYTES = 1 << 30


@dataclass(frozen=True)
class DistChunk:
    """One stored piece of a tensor: where it sits in the tensor and in which file."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    file: str
    offset: int
    length: int


@dataclass(frozen=True)
class DistTensor:
    """A tensor as `.metadata` describes it: global shape, torch dtype name, chunks."""

    key: str
    shape: tuple[int, ...]
    dtype: str
    chunks: tuple[DistChunk, ...]


@dataclass
class DistMetadata:
    """What a `torch_dist` folder holds, from its metadata files only."""

    folder: str
    backend: str
    tensors: dict[str, DistTensor]
    objects: list[str] = field(default_factory=list)
    """Keys of non-tensor entries (Megatron's sharded objects such as `_extra_state`)."""
    files: tuple[str, ...] = ()


def is_torch_dist(folder: str) -> bool:
    """True when `folder` is a Megatron distributed checkpoint (`metadata.json` + `.metadata`)."""
    return os.path.isfile(os.path.join(folder, "metadata.json")) and os.path.isfile(
        os.path.join(folder, ".metadata")
    )


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        import torch

        if (module, name) in ALLOWED or (
            module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)
        ):
            return super().find_class(module, name)
        if module == "torch" and name.endswith("_format"):
            value = getattr(torch, name, None)
            if isinstance(value, torch.memory_format):
                return value
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def _load_pickle(path: str) -> Any:
    try:
        size = os.path.getsize(path)
        if size > MAX_METADATA_BYTES:
            raise CheckpointError(f"{path}: {size} bytes is too large for checkpoint metadata")
        with open(path, "rb") as f:
            raw = f.read()
        return _MetadataUnpickler(io.BytesIO(raw)).load()
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"{path}: not torch checkpoint metadata ({exc}); rankscope never runs pickled code"
        ) from None
    except (EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as exc:
        raise CheckpointError(f"{path}: truncated or corrupt metadata ({exc!r:.120})") from None
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _backend(folder: str) -> str:
    path = os.path.join(folder, "metadata.json")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: cannot read Megatron's metadata.json: {exc}") from None
    backend = doc.get("sharded_backend") if isinstance(doc, dict) else None
    if not isinstance(backend, str):
        raise CheckpointError(f"{path}: no sharded_backend: not a Megatron distributed checkpoint")
    return backend


def read_dist_metadata(folder: str) -> DistMetadata:
    """Tensors with global shapes, dtypes and chunks; object keys; no tensor data read."""
    backend = _backend(folder)
    if backend != "torch_dist":
        raise CheckpointError(
            f"{folder}: a Megatron {backend!r} checkpoint; rankscope reads the torch_dist backend"
        )
    path = os.path.join(folder, ".metadata")
    meta = _load_pickle(path)
    try:
        entries = dict(meta.state_dict_metadata)
        storage = dict(meta.storage_data or {})
    except (AttributeError, TypeError):
        raise CheckpointError(f"{path}: not a torch Distributed Checkpoint Metadata") from None
    where = {(k.fqn, tuple(k.offset or ())): v for k, v in storage.items()}
    tensors: dict[str, DistTensor] = {}
    objects: list[str] = []
    files: set[str] = set()
    for key, entry in entries.items():
        if not hasattr(entry, "chunks"):
            objects.append(key)
            continue
        chunks = []
        for c in entry.chunks:
            info = where.get((key, tuple(c.offsets)))
            if info is None:
                raise CheckpointError(f"{path}: no storage recorded for {key} at {list(c.offsets)}")
            if getattr(info, "transform_descriptors", None):
                raise CheckpointError(
                    f"{path}: {key} is stored with transforms {info.transform_descriptors}; "
                    "rankscope reads plain torch.save chunks"
                )
            files.add(info.relative_path)
            chunks.append(
                DistChunk(
                    tuple(c.offsets), tuple(c.sizes), info.relative_path, info.offset, info.length
                )
            )
        dtype = str(entry.properties.dtype).removeprefix("torch.")
        tensors[key] = DistTensor(key, tuple(entry.size), dtype, tuple(chunks))
    missing = sorted(f for f in files if not os.path.isfile(os.path.join(folder, f)))
    if missing:
        raise CheckpointError(f"{folder}: data file {missing[0]} listed in .metadata is missing")
    return DistMetadata(folder, backend, tensors, sorted(objects), tuple(sorted(files)))
