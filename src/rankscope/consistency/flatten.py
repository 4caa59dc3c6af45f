"""What to compare: a mapping of tensors (nested allowed), a state_dict, or an nn.Module."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rankscope.errors import UserError


@dataclass(frozen=True)
class Flattened:
    tensors: list[tuple[str, torch.Tensor]]
    skipped: tuple[str, ...]
    """Entries that are not tensors (a step counter, a config string): named, not compared."""


def flatten_tensors(source: Any, *, include_grads: bool = False) -> Flattened:
    """Named tensors in a stable order, dotted names for nesting: `layers.0.weight`.

    An nn.Module gives its parameters and buffers (and `<name>.grad` with include_grads).
    Example: `flatten_tensors({"opt": {"exp_avg": t}}).tensors[0][0] == "opt.exp_avg"`.
    """
    tensors: list[tuple[str, torch.Tensor]] = []
    skipped: list[str] = []
    if isinstance(source, torch.nn.Module):
        for name, param in source.named_parameters():
            tensors.append((name, param.detach()))
        for name, buffer in source.named_buffers():
            tensors.append((name, buffer.detach()))
        if include_grads:
            for name, param in source.named_parameters():
                if param.grad is not None:
                    tensors.append((f"{name}.grad", param.grad.detach()))
                else:
                    skipped.append(f"{name}.grad")
    elif isinstance(source, torch.Tensor):
        tensors.append(("tensor", source.detach()))
    elif isinstance(source, Mapping):
        _walk(source, "", tensors, skipped)
    else:
        raise UserError(
            f"verify_distributed_tensors: expected a mapping of tensors, a state_dict or an "
            f"nn.Module, got {type(source).__name__}"
        )
    _check_unique(tensors)
    return Flattened(tensors, tuple(skipped))


def _walk(
    value: Any, prefix: str, tensors: list[tuple[str, torch.Tensor]], skipped: list[str]
) -> None:
    if isinstance(value, torch.Tensor):
        tensors.append((prefix or "tensor", value.detach()))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _walk(item, f"{prefix}.{key}" if prefix else str(key), tensors, skipped)
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
        for index, item in enumerate(value):
            _walk(item, f"{prefix}.{index}" if prefix else str(index), tensors, skipped)
    else:
        skipped.append(prefix)


def _check_unique(tensors: list[tuple[str, torch.Tensor]]) -> None:
    seen: set[str] = set()
    for name, _ in tensors:
        if name in seen:
            raise UserError(f"two tensors are both named {name!r} once flattened; rename one")
        seen.add(name)
