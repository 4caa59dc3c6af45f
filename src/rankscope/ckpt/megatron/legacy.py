"""Legacy Megatron checkpoints: `mp_rank_NN[_PPP]/model_optim_rng.pt`, read without running code.

`torch.load(weights_only=True)` refuses these files as they are: Megatron-LM pickles its
`argparse.Namespace` of arguments, numpy random states and a few of its own enums and configs.
`ALLOWED` lets exactly those through torch's safe-globals mechanism, for the one load only:
`argparse.Namespace`, `types.SimpleNamespace`, `pathlib.PosixPath`, `io.BytesIO` (Transformer
Engine `_extra_state`), numpy's array reconstruction (`_reconstruct`, `ndarray`, `dtype`,
`UInt32DType`) and, for Megatron's own classes (`ModelType`, `AttnBackend`, `AttnMaskType`,
`CudaGraphScope`, `RerunMode`, `RerunState`, `RerunDiagnostic`, `Signals`, `OptimizerConfig`,
`TransformerConfig`), an inert stand-in (`MegatronObject`) that only records its arguments:
Megatron is never imported and no pickled callable other than these runs.

Pipeline stages (`mp_rank_NN_PPP`) number their layers from 0 each; their layers are renumbered
globally (stage p starts after the layers of stages 0..p-1).

Example: `legacy_manifest("iter_0000100").tensor_parallel`.
"""

from __future__ import annotations

import argparse
import io
import os
import pathlib
import re
import types
from collections.abc import Mapping
from typing import Any

from rankscope.ckpt.model import Manifest, SourceKind, TensorInfo
from rankscope.ckpt.tensor_source import TensorSource, manifest_of_state_dict
from rankscope.errors import CheckpointError

__all__ = [
    "ALLOWED_NAMES",
    "MegatronObject",
    "is_legacy",
    "legacy_manifest",
    "legacy_sources",
    "load_legacy",
]

_RANK_DIR = re.compile(r"^mp_rank_(\d+)(?:_(\d+))?$")
_FILES = ("model_optim_rng.pt", "model_rng.pt")
_LAYER = re.compile(r"^((?:module\.)?decoder\.layers\.)(\d+)\.")
_MEGATRON_CLASSES = (
    "megatron.core.enums.ModelType",
    "megatron.core.transformer.enums.AttnBackend",
    "megatron.core.transformer.enums.AttnMaskType",
    "megatron.core.transformer.enums.CudaGraphScope",
    "megatron.core.rerun_state_machine.RerunMode",
    "megatron.core.rerun_state_machine.RerunState",
    "megatron.core.rerun_state_machine.RerunDiagnostic",
    "signal.Signals",
    "megatron.core.optimizer.optimizer_config.OptimizerConfig",
    "megatron.core.transformer.transformer_config.TransformerConfig",
)


class MegatronObject:
    """Stand-in for a Megatron enum or config object found in a legacy checkpoint."""

    def __init__(self, *args: Any) -> None:
        self.args = args

    def __setstate__(self, state: Any) -> None:
        self.state = state


def _allowed() -> list[Any]:
    import numpy as np

    reconstruct = np._core.multiarray._reconstruct  # type: ignore[attr-defined]
    allowed: list[Any] = [argparse.Namespace, types.SimpleNamespace, pathlib.PosixPath, io.BytesIO]
    allowed += [
        (reconstruct, "numpy.core.multiarray._reconstruct"),
        (reconstruct, "numpy._core.multiarray._reconstruct"),
        np.ndarray,
        np.dtype,
        np.dtypes.UInt32DType,
    ]
    allowed += [(MegatronObject, name) for name in _MEGATRON_CLASSES]
    return allowed


ALLOWED_NAMES = (
    "argparse.Namespace",
    "types.SimpleNamespace",
    "pathlib.PosixPath",
    "io.BytesIO",
    "numpy._core.multiarray._reconstruct",
    "numpy.ndarray",
    "numpy.dtype",
    "numpy.dtypes.UInt32DType",
    *_MEGATRON_CLASSES,
)
"""Every global a legacy checkpoint may name (Megatron's own ones become `MegatronObject`)."""


def load_legacy(path: str) -> Any:
    """`torch.load(weights_only=True)` of one rank file with exactly `ALLOWED_NAMES` allowed."""
    import pickle

    import torch

    try:
        with torch.serialization.safe_globals(_allowed()):
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0][:200]
        raise CheckpointError(
            f"{path}: refused: it pickles a global outside the allowed list ({first}); "
            "rankscope never runs pickled code"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise CheckpointError(f"{path}: not a readable torch file ({first})") from None


def _rank_files(folder: str) -> dict[tuple[int, int], str]:
    found: dict[tuple[int, int], str] = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return found
    for name in names:
        m = _RANK_DIR.match(name)
        if not m:
            continue
        for f in _FILES:
            path = os.path.join(folder, name, f)
            if os.path.isfile(path):
                found[(int(m.group(1)), int(m.group(2) or 0))] = path
    return found


def is_legacy(folder: str) -> bool:
    """True when `folder` holds `mp_rank_NN[_PPP]/model_optim_rng.pt` files."""
    return bool(_rank_files(folder))


def _grid(folder: str) -> tuple[int, int, dict[tuple[int, int], str]]:
    files = _rank_files(folder)
    tp = 1 + max(t for t, _ in files)
    pp = 1 + max(p for _, p in files)
    missing = [(t, p) for t in range(tp) for p in range(pp) if (t, p) not in files]
    if missing:
        t, p = missing[0]
        name = f"mp_rank_{t:02d}" + (f"_{p:03d}" if pp > 1 else "")
        raise CheckpointError(f"{folder}: rank folder {name} is missing ({tp} TP x {pp} PP)")
    return tp, pp, files


def _model_state(doc: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(doc, Mapping):
        raise CheckpointError(f"{path}: holds a {type(doc).__name__}, not a Megatron checkpoint")
    state = doc.get("model")
    if state is None and "model0" in doc:
        raise CheckpointError(
            f"{path}: virtual pipeline stages (model0, model1, ...) are not supported yet"
        )
    if not isinstance(state, Mapping):
        raise CheckpointError(f"{path}: no 'model' state dict in this Megatron checkpoint")
    return state


def _merged_stages(paths: list[str]) -> tuple[dict[str, Any], list[str], list[int]]:
    """One TP rank's tensors over all stages (layers renumbered), extra-state keys, layers/stage."""
    import torch

    merged: dict[str, Any] = {}
    extra: list[str] = []
    per_stage: list[int] = []
    offset = 0
    for path in paths:
        state = _model_state(load_legacy(path), path)
        layers = {int(m.group(2)) for k in state if (m := _LAYER.match(k))}
        for key, value in state.items():
            name = key.removeprefix("module.")
            m = _LAYER.match(name)
            if m:
                name = f"{m.group(1)}{int(m.group(2)) + offset}.{name[m.end() :]}"
            if name.endswith("_extra_state"):
                extra.append(name)
            elif isinstance(value, torch.Tensor):
                merged[name] = value
        per_stage.append(len(layers))
        offset += len(layers)
    return merged, extra, per_stage


def legacy_sources(folder: str) -> list[TensorSource]:
    """One source per tensor-parallel rank, pipeline stages merged (global layer numbers)."""
    tp, pp, files = _grid(folder)
    out = []
    for t in range(tp):
        state, _, _ = _merged_stages([files[(t, p)] for p in range(pp)])
        infos = manifest_of_state_dict(state, source=folder).tensors
        out.append(TensorSource(os.path.join(folder, f"mp_rank_{t:02d}"), infos, state))
    return out


def legacy_manifest(folder: str) -> Manifest:
    """Rank 0's tensors (all stages), with what was recognised in `metadata`."""
    tp, pp, files = _grid(folder)
    state, extra, per_stage = _merged_stages([files[(0, p)] for p in range(pp)])
    tensors: dict[str, TensorInfo] = manifest_of_state_dict(state, source=folder).tensors
    starts = [sum(per_stage[:p]) for p in range(pp)]
    return Manifest(
        source=folder,
        kind=SourceKind.MCORE_LEGACY,
        tensors=tensors,
        files=tuple(sorted(files.values())),
        metadata={
            "megatron.pipeline_stages": str(pp),
            "megatron.stage_first_layers": ",".join(map(str, starts)),
            "megatron.allowed_classes": ", ".join(ALLOWED_NAMES),
        },
        tp_size=tp,
        extra_state=extra,
    )
