"""Inspect and diff manifests: `inspect_manifest`, `tp_evidence`, `diff_manifests`.

Pure: manifests in, `Inspection` / `CkptDiff` (records in `model`) out. The explanations a diff
carries come from `explain`.
"""

from __future__ import annotations

import re
from collections import Counter

from rankscope.ckpt.explain import explain
from rankscope.ckpt.model import (
    CkptDiff,
    DtypeMismatch,
    Inspection,
    Manifest,
    ShapeMismatch,
    TensorInfo,
    TpEvidence,
)
from rankscope.ckpt.schemes import detect_scheme, strip_wrappers

__all__ = ["diff_manifests", "inspect_manifest", "tp_evidence"]


# ------------------------------------------------------------------- inspect
def inspect_manifest(manifest: Manifest) -> Inspection:
    """Totals, dtype mix, naming scheme and tensor-parallel evidence of one checkpoint."""
    tensors = list(manifest.tensors.values())
    dtype_params: Counter[str] = Counter()
    for t in tensors:
        dtype_params[t.dtype or "?"] += t.numel
    return Inspection(
        source=manifest.source,
        kind=manifest.kind,
        tensor_count=len(tensors),
        total_params=sum(t.numel for t in tensors),
        total_bytes=sum(t.nbytes for t in tensors),
        dtype_params=dict(dtype_params.most_common()),
        scheme=detect_scheme(manifest.tensors),
        tensor_parallel=tp_evidence(manifest),
        files=len(manifest.files),
        tensors=tensors,
        extra_state=len(manifest.extra_state),
        notes=_notes(manifest),
    )


def _notes(manifest: Manifest) -> list[str]:
    """What a Megatron reader recognised, as lines for `inspect`."""
    meta, out = manifest.metadata, []
    if "megatron.backend" in meta:
        out.append(
            f"Megatron distributed checkpoint ({meta['megatron.backend']}): global shapes from "
            f".metadata, {meta.get('megatron.layers_stacked', '?')} layers stacked on the leading "
            "axis (shown per layer)"
        )
    if "megatron.pipeline_stages" in meta:
        out.append(
            f"legacy Megatron checkpoint: {meta['megatron.pipeline_stages']} pipeline stage(s), "
            f"stages start at layers {meta.get('megatron.stage_first_layers')} (renumbered "
            "globally)"
        )
        out.append(f"classes allowed when unpickling: {meta['megatron.allowed_classes']}")
    if manifest.extra_state:
        out.append(
            f"{len(manifest.extra_state)} _extra_state entries (Transformer Engine / Megatron "
            "module state, not weights; not counted as tensors)"
        )
    if manifest.other_objects:
        out.append(f"{len(manifest.other_objects)} other sharded objects")
    return out


_PROJ = re.compile(r"(self_attn\.o_proj|self_attention\.linear_proj)\.weight$")
_NORM = re.compile(r"(input_layernorm\.weight|linear_qkv\.layer_norm_weight)$")


def tp_evidence(manifest: Manifest) -> TpEvidence | None:
    """Tensor-parallel size from the layout, the metadata, or the attention output shape."""
    if manifest.tp_size and manifest.tp_size > 1:
        return TpEvidence(manifest.tp_size, "the folder or metadata says so (shapes of rank 0)")
    names = {strip_wrappers(n)[0]: t for n, t in manifest.tensors.items()}
    proj = next((t for n, t in names.items() if _PROJ.search(n)), None)
    if proj is None or len(proj.shape) != 2:
        return None
    if manifest.dims is not None:
        full = manifest.dims.heads * manifest.dims.head_dim
        source = "config.json"
    else:
        norm = next((t for n, t in names.items() if _NORM.search(n)), None)
        if norm is None or len(norm.shape) != 1:
            return None
        full, source = norm.shape[0], "the hidden size (layer norm)"
    if proj.shape[1] < full and full % proj.shape[1] == 0:
        n = full // proj.shape[1]
        return TpEvidence(
            n, f"{proj.name} has {proj.shape[1]} input columns, {source} implies {full}"
        )
    return None


# ---------------------------------------------------------------------- diff
def diff_manifests(expected: Manifest, actual: Manifest) -> CkptDiff:
    """Missing, unexpected and mismatched tensors of `actual`, with explanations."""
    e_scheme, a_scheme = detect_scheme(expected.tensors), detect_scheme(actual.tensors)
    missing = sorted(set(expected.tensors) - set(actual.tensors))
    unexpected = sorted(set(actual.tensors) - set(expected.tensors))
    shapes, dtypes = _compare(expected.tensors, actual.tensors)
    return CkptDiff(
        expected=expected.source,
        actual=actual.source,
        expected_scheme=e_scheme,
        actual_scheme=a_scheme,
        matched=len(set(expected.tensors) & set(actual.tensors)),
        missing=missing,
        unexpected=unexpected,
        shape_mismatches=shapes,
        dtype_mismatches=dtypes,
        explanations=explain(expected, actual, e_scheme, a_scheme),
    )


def _compare(
    expected: dict[str, TensorInfo], actual: dict[str, TensorInfo]
) -> tuple[list[ShapeMismatch], list[DtypeMismatch]]:
    shapes, dtypes = [], []
    for name in sorted(set(expected) & set(actual)):
        e, a = expected[name], actual[name]
        if e.shape != a.shape:
            shapes.append(ShapeMismatch(name, e.shape, a.shape))
        elif e.dtype and a.dtype and e.dtype != a.dtype:
            dtypes.append(DtypeMismatch(name, e.dtype, a.dtype))
    return shapes, dtypes
