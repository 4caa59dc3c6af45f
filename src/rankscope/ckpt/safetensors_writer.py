"""Streaming safetensors writer: the header first (from planned shapes), then tensor by tensor.

Peak memory is one tensor, not the model. The file appears under its final name only when
every tensor was written (temporary name, then `os.replace`); on any error it is removed.

Example: `with SafetensorsWriter(path, infos) as w: w.write("a", tensor)`.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Sequence
from types import TracebackType

import torch

from rankscope.ckpt.model import TensorInfo

__all__ = ["CODE_OF_DTYPE", "DTYPE_OF_CODE", "SafetensorsWriter", "code_of"]

CODE_OF_DTYPE: dict[torch.dtype, str] = {
    torch.bool: "BOOL",
    torch.uint8: "U8",
    torch.int8: "I8",
    torch.int16: "I16",
    torch.int32: "I32",
    torch.int64: "I64",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.float32: "F32",
    torch.float64: "F64",
    torch.complex64: "C64",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
}
DTYPE_OF_CODE = {v: k for k, v in CODE_OF_DTYPE.items()}


def code_of(dtype: torch.dtype) -> str:
    """The safetensors code of a torch dtype, e.g. `torch.bfloat16` -> `BF16`."""
    try:
        return CODE_OF_DTYPE[dtype]
    except KeyError:
        raise ValueError(f"dtype {dtype} has no safetensors code") from None


class SafetensorsWriter:
    """Writes `entries` (names, shapes, dtypes known up front) to `path` in that order."""

    def __init__(
        self,
        path: str,
        entries: Sequence[TensorInfo],
        *,
        metadata: dict[str, str] | None = None,
    ) -> None:
        self.path = path
        self._entries = list(entries)
        self._next = 0
        header: dict[str, object] = {"__metadata__": dict(metadata or {"format": "pt"})}
        offset = 0
        for e in self._entries:
            header[e.name] = {
                "dtype": e.dtype,
                "shape": list(e.shape),
                "data_offsets": [offset, offset + e.nbytes],
            }
            offset += e.nbytes
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        self._prefix = struct.pack("<Q", len(raw)) + raw
        self._tmp = os.path.join(
            os.path.dirname(path) or ".", f".{os.path.basename(path)}.tmp-{os.getpid()}"
        )

    def __enter__(self) -> SafetensorsWriter:
        self._fh = open(self._tmp, "wb")
        self._fh.write(self._prefix)
        return self

    def write(self, name: str, tensor: torch.Tensor) -> None:
        """Append the next tensor; its name, shape and dtype must be the planned ones."""
        if self._next >= len(self._entries):
            raise ValueError(f"{self.path}: unplanned tensor {name}")
        want = self._entries[self._next]
        got = (name, tuple(tensor.shape), code_of(tensor.dtype))
        if got != (want.name, want.shape, want.dtype):
            raise ValueError(
                f"{self.path}: expected {want.name} {want.dtype}{list(want.shape)}, "
                f"got {name} {got[2]}{list(got[1])}"
            )
        self._fh.write(tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy().data)
        self._next += 1

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._fh.close()
        if exc_type is None and self._next != len(self._entries):
            os.unlink(self._tmp)
            raise ValueError(
                f"{self.path}: {len(self._entries) - self._next} planned tensors never written"
            )
        if exc_type is not None:
            os.unlink(self._tmp)
            return
        os.replace(self._tmp, self.path)
