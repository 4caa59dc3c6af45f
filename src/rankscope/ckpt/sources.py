"""Finding and reading checkpoints: files, sharded folders, TP folders, torch files, live modules.

Manifests come from safetensors headers (no tensor data read) or from `torch.load` with
`weights_only=True` (never executes pickled code; memory-mapped). Tensor access for conversion
goes through `TensorSource` (in tensor_source.py, re-exported here), one tensor at a time. torch
is imported only when needed.
"""

from __future__ import annotations

import glob
import json
import os
import re
from typing import Any

from rankscope.ckpt.header import read_header
from rankscope.ckpt.model import Manifest, SourceKind, TensorInfo
from rankscope.ckpt.tensor_source import TensorSource, flatten_state_dict, manifest_of_state_dict
from rankscope.errors import CheckpointError

__all__ = [
    "TensorSource",
    "find_config",
    "load_manifest",
    "manifest_of_state_dict",
    "open_tensors",
]

_TORCH_SUFFIXES = (".bin", ".pt", ".pth")
_MP_RANK = re.compile(r"^mp_rank_(\d+)$")


def load_manifest(path: str) -> Manifest:
    """The tensors at `path`: a file, a sharded folder, a folder of `mp_rank_NN/`, a config."""
    from rankscope.ckpt.expected import dims_of_folder, manifest_from_config

    path = os.path.normpath(path)
    if not os.path.exists(path):
        raise CheckpointError(f"{path}: no such file or directory")
    if os.path.isfile(path):
        if path.endswith(".safetensors"):
            return _safetensors_manifest(path, [path], SourceKind.SAFETENSORS)
        if path.endswith(".index.json"):
            return _index_manifest(path)
        if path.endswith(".json"):
            return manifest_from_config(path)
        if path.endswith(_TORCH_SUFFIXES):
            return manifest_of_state_dict(_torch_load(path), source=path, kind=SourceKind.TORCH)
        raise CheckpointError(
            f"{path}: not a checkpoint rankscope reads (.safetensors, .bin, .pt, "
            "*.index.json, config.json, or a folder of them)"
        )
    manifest = _folder_manifest(path)
    if manifest.dims is None:
        manifest.dims = dims_of_folder(path)
    return manifest


def _folder_manifest(folder: str) -> Manifest:
    from rankscope.ckpt.expected import manifest_from_config
    from rankscope.ckpt.megatron import dist_meta, legacy

    if dist_meta.is_torch_dist(folder):
        from rankscope.ckpt.megatron.dist_source import dist_manifest

        return dist_manifest(folder)
    if legacy.is_legacy(folder):
        return legacy.legacy_manifest(folder)
    index = _find_index(folder)
    if index:
        return _index_manifest(index)
    files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
    if files:
        kind = SourceKind.SAFETENSORS if len(files) == 1 else SourceKind.SAFETENSORS_SHARDED
        return _safetensors_manifest(folder, files, kind)
    ranks = _mp_rank_dirs(folder)
    if ranks:
        first = _folder_manifest(ranks[0])
        first.source, first.kind, first.tp_size = folder, SourceKind.MCORE_TP, len(ranks)
        return first
    torch_files = sorted(
        f for s in _TORCH_SUFFIXES for f in glob.glob(os.path.join(folder, "*" + s))
    )
    if torch_files:
        merged: dict[str, TensorInfo] = {}
        for f in torch_files:
            merged.update(manifest_of_state_dict(_torch_load(f), source=f).tensors)
        kind = SourceKind.TORCH
        return Manifest(source=folder, kind=kind, tensors=merged, files=tuple(torch_files))
    config = os.path.join(folder, "config.json")
    if os.path.isfile(config):
        return manifest_from_config(config)
    raise CheckpointError(
        f"{folder}: no *.safetensors, *.index.json, mp_rank_NN/, *.bin/*.pt or config.json here"
    )


def _find_index(folder: str) -> str | None:
    found = sorted(glob.glob(os.path.join(folder, "*.safetensors.index.json")))
    return found[0] if found else None


def _mp_rank_dirs(folder: str) -> list[str]:
    found = []
    for name in os.listdir(folder):
        m = _MP_RANK.match(name)
        if m and os.path.isdir(os.path.join(folder, name)):
            found.append((int(m.group(1)), os.path.join(folder, name)))
    found.sort()
    if found and [r for r, _ in found] != list(range(len(found))):
        raise CheckpointError(
            f"{folder}: tensor-parallel folders {[os.path.basename(d) for _, d in found]} "
            "are not mp_rank_00 .. mp_rank_N-1: a rank is missing"
        )
    return [d for _, d in found]


def _index_map(index: str) -> dict[str, str]:
    try:
        with open(index, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{index}: cannot read the index: {exc}") from None
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        raise CheckpointError(f"{index}: no weight_map of tensor name -> shard file")
    return weight_map


def _index_manifest(index: str) -> Manifest:
    folder = os.path.dirname(index) or "."
    weight_map = _index_map(index)
    shards = sorted(set(weight_map.values()))
    for shard in shards:
        if not os.path.isfile(os.path.join(folder, shard)):
            count = sum(1 for v in weight_map.values() if v == shard)
            raise CheckpointError(f"{index}: shard {shard} (listed for {count} tensors) is missing")
    files = [os.path.join(folder, s) for s in shards]
    manifest = _safetensors_manifest(folder, files, SourceKind.SAFETENSORS_SHARDED)
    for name, shard in weight_map.items():
        info = manifest.tensors.get(name)
        if info is None or os.path.basename(info.file) != shard:
            raise CheckpointError(f"{index}: tensor {name} is not in its shard {shard}")
    return manifest


def _safetensors_manifest(source: str, files: list[str], kind: SourceKind) -> Manifest:
    tensors: dict[str, TensorInfo] = {}
    metadata: dict[str, str] = {}
    for f in files:
        header = read_header(f)
        for name, info in header.tensors.items():
            if name in tensors:
                raise CheckpointError(f"{f}: tensor {name} is also in {tensors[name].file}")
            tensors[name] = info
        metadata = metadata or header.metadata
    tp = metadata.get("rankscope.tp_size")
    return Manifest(
        source=source,
        kind=kind,
        tensors=tensors,
        files=tuple(files),
        metadata=metadata,
        tp_size=int(tp) if tp and tp.isdigit() else None,
    )


def _torch_load(path: str) -> Any:
    import pickle

    import torch

    try:
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc):
                raise
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0][:160]
        raise CheckpointError(
            f"{path}: torch.load(weights_only=True) refuses it (it pickles more than tensors: "
            f"{first}); rankscope never runs pickled code"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise CheckpointError(f"{path}: not a readable torch file ({first})") from None


def find_config(path: str) -> str | None:
    """config.json in `path` (a folder) or beside it (a file), if there is one."""
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    candidate = os.path.join(folder, "config.json")
    return candidate if os.path.isfile(candidate) else None


def open_tensors(path: str) -> list[TensorSource]:
    """One source per tensor-parallel rank (one in all for an unsharded checkpoint)."""
    from rankscope.ckpt.megatron import dist_meta, legacy

    path = os.path.normpath(path)
    if os.path.isdir(path) and dist_meta.is_torch_dist(path):
        from rankscope.ckpt.megatron.dist_source import DistTensorSource

        return [DistTensorSource(path)]
    if os.path.isdir(path) and legacy.is_legacy(path):
        return legacy.legacy_sources(path)
    if os.path.isdir(path) and not _find_index(path) and not glob.glob(f"{path}/*.safetensors"):
        ranks = _mp_rank_dirs(path)
        if ranks:
            return [s for r in ranks for s in open_tensors(r)]
    manifest = load_manifest(path)
    if manifest.kind is SourceKind.CONFIG:
        raise CheckpointError(f"{path}: holds a config but no tensors")
    if manifest.kind is SourceKind.TORCH:
        state: dict[str, Any] = {}
        for f in manifest.files:
            state.update(flatten_state_dict(_torch_load(f), f))
        return [TensorSource(path, manifest_of_state_dict(state, source=path).tensors, state)]
    return [TensorSource(path, manifest.tensors, {})]
