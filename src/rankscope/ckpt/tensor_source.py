"""Tensors by name (`TensorSource`) and the manifest of a loaded state_dict.

Below both sources.py (which finds checkpoints) and megatron/ (whose readers are sources too),
so that each can use them without importing the other. torch is imported only when needed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rankscope.ckpt.model import Manifest, SourceKind, TensorInfo
from rankscope.errors import CheckpointError

if TYPE_CHECKING:
    import torch

__all__ = ["TensorSource", "flatten_state_dict", "manifest_of_state_dict"]


def manifest_of_state_dict(
    state: Mapping[str, Any] | Any,
    *,
    source: str = "<state_dict>",
    kind: SourceKind = SourceKind.LIVE,
) -> Manifest:
    """A manifest of an `nn.Module` (its state_dict) or of a mapping name -> tensor."""
    import torch

    from rankscope.ckpt.safetensors_writer import CODE_OF_DTYPE

    if isinstance(state, torch.nn.Module):
        state = state.state_dict()
    tensors = {
        name: TensorInfo(
            name=name,
            shape=tuple(t.shape),
            dtype=CODE_OF_DTYPE.get(t.dtype, str(t.dtype).removeprefix("torch.")),
            file=source,
        )
        for name, t in flatten_state_dict(state, source).items()
    }
    return Manifest(source=source, kind=kind, tensors=tensors, files=(source,))


def flatten_state_dict(state: Any, source: str, prefix: str = "") -> dict[str, torch.Tensor]:
    """Dotted name -> tensor, through nested mappings and a `state_dict`/`model`/`module` key."""
    import torch

    if not isinstance(state, Mapping):
        raise CheckpointError(f"{source}: holds a {type(state).__name__}, not a state_dict")
    for wrapper in ("state_dict", "model", "module"):
        inner = state.get(wrapper)
        if not prefix and isinstance(inner, Mapping) and not isinstance(inner, torch.Tensor):
            return flatten_state_dict(inner, source)
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        name = f"{prefix}{key}"
        if isinstance(value, torch.Tensor):
            out[name] = value
        elif isinstance(value, Mapping):
            out.update(flatten_state_dict(value, source, name + "."))
    return out


class TensorSource:
    """Tensors by name from safetensors files (memory-mapped) or a loaded state_dict."""

    def __init__(
        self, path: str, infos: Mapping[str, TensorInfo], state: Mapping[str, Any]
    ) -> None:
        self.path = path
        self.infos = dict(infos)
        self._state = dict(state)
        self._handles: dict[str, Any] = {}

    def names(self) -> list[str]:
        return list(self.infos)

    def get(self, name: str) -> torch.Tensor:
        if name in self._state:
            tensor: torch.Tensor = self._state[name]
            return tensor
        result: torch.Tensor = self.handle(name).get_tensor(name)
        return result

    def handle(self, name: str) -> Any:
        """The open safetensors file that holds `name` (memory-mapped, reads by slice)."""
        from safetensors import safe_open

        file = self.infos[name].file
        handle = self._handles.get(file)
        if handle is None:
            handle = self._handles[file] = safe_open(file, framework="pt")
        return handle
