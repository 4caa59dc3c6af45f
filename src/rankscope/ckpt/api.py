"""The Python entry points: `inspect(path)` and `diff(expected, actual)`.

Either side of `diff` may be a path (checkpoint, folder, config.json), an `nn.Module` or a
state_dict. Example: `rankscope.ckpt.diff(model, "out/checkpoint-100").matches`.
"""

from __future__ import annotations

import os
from typing import Any

from rankscope.ckpt.analysis import diff_manifests, inspect_manifest
from rankscope.ckpt.model import CkptDiff, Inspection, Manifest
from rankscope.ckpt.sources import load_manifest
from rankscope.ckpt.tensor_source import manifest_of_state_dict

__all__ = ["diff", "inspect", "manifest_of"]


def manifest_of(thing: Any) -> Manifest:
    """A manifest of a path, an `nn.Module` or a state_dict."""
    if isinstance(thing, str | os.PathLike):
        return load_manifest(os.fspath(thing))
    return manifest_of_state_dict(thing, source=f"<{type(thing).__name__}>")


def inspect(path: str | os.PathLike[str]) -> Inspection:
    """What a checkpoint holds, from headers only. Example: `inspect("ckpt").scheme.label`."""
    return inspect_manifest(load_manifest(os.fspath(path)))


def diff(expected: Any, actual: Any) -> CkptDiff:
    """Missing/unexpected/mismatched tensors of `actual` against `expected`, explained."""
    return diff_manifests(manifest_of(expected), manifest_of(actual))
