"""Checkpoints without loading tensors: inspect, diff with explanations, HF <-> Megatron-core.

Example: `rankscope.ckpt.diff(model, "ckpt/").explanations`.
"""

from __future__ import annotations

from rankscope.ckpt.analysis import diff_manifests, inspect_manifest
from rankscope.ckpt.api import diff, inspect
from rankscope.ckpt.convert import ConvertResult, convert
from rankscope.ckpt.header import read_header
from rankscope.ckpt.model import (
    CkptDiff,
    Explanation,
    ExplanationKind,
    Inspection,
    Manifest,
    ModelDims,
    SourceKind,
    TensorInfo,
)
from rankscope.ckpt.schemes import Scheme, SchemeInfo, detect_scheme

__all__ = [
    "CkptDiff",
    "ConvertResult",
    "Explanation",
    "ExplanationKind",
    "Inspection",
    "Manifest",
    "ModelDims",
    "Scheme",
    "SchemeInfo",
    "SourceKind",
    "TensorInfo",
    "convert",
    "detect_scheme",
    "diff",
    "diff_manifests",
    "inspect",
    "inspect_manifest",
    "read_header",
]
