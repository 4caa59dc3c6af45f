"""Reading a safetensors header (8-byte little-endian length, then JSON) without tensor data.

Everything a header may get wrong (truncation, not JSON, offsets outside the file, an unknown
dtype, overlapping tensors) raises `CheckpointError` naming the file; nothing else escapes.

Example: `read_header("model.safetensors").tensors["lm_head.weight"].shape`.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field

from rankscope.ckpt.model import DTYPE_BITS, TensorInfo
from rankscope.errors import CheckpointError

__all__ = ["MAX_HEADER_BYTES", "SafetensorsHeader", "parse_header", "read_header"]

MAX_HEADER_BYTES = 100 * 1024 * 1024
"""The limit the safetensors library itself enforces."""


@dataclass
class SafetensorsHeader:
    """The tensors of one safetensors file, in data order, and its `__metadata__`."""

    path: str
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str] = field(default_factory=dict)
    data_start: int = 0
    offsets: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Byte range of each tensor, relative to `data_start`."""


def read_header(path: str | os.PathLike[str]) -> SafetensorsHeader:
    """Parse the header of `path`; reads 8 bytes plus the header, never the tensors."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            prefix = f.read(8)
            if len(prefix) < 8:
                raise CheckpointError(f"{name}: truncated safetensors file ({size} bytes)")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES:
                raise CheckpointError(
                    f"{name}: header length {length} is over the {MAX_HEADER_BYTES} byte limit: "
                    "not a safetensors file?"
                )
            if 8 + length > size:
                raise CheckpointError(
                    f"{name}: truncated: the header says {length} bytes, the file has {size - 8}"
                )
            raw = f.read(length)
    except OSError as exc:
        raise CheckpointError(f"{name}: cannot read: {exc.strerror or exc}") from None
    return parse_header(raw, data_size=size - 8 - length, path=name)


def parse_header(raw: bytes, *, data_size: int, path: str) -> SafetensorsHeader:
    """Validate the JSON header `raw` of a file whose data section has `data_size` bytes."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError, JSONDecodeError
        raise CheckpointError(f"{path}: the header is not JSON ({_short(exc)})") from None
    if not isinstance(doc, dict):
        raise CheckpointError(f"{path}: the header is a JSON {type(doc).__name__}, not an object")
    metadata = doc.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise CheckpointError(f"{path}: __metadata__ must map strings to strings")
    tensors: dict[str, TensorInfo] = {}
    offsets: dict[str, tuple[int, int]] = {}
    for key, entry in doc.items():
        info, span = _tensor(path, key, entry, data_size)
        tensors[key] = info
        offsets[key] = span
    _check_no_overlap(path, offsets)
    order = sorted(tensors, key=lambda k: offsets[k][0])
    return SafetensorsHeader(
        path=path,
        tensors={k: tensors[k] for k in order},
        metadata=dict(metadata),
        data_start=8 + len(raw),
        offsets=offsets,
    )


def _tensor(
    path: str, key: str, entry: object, data_size: int
) -> tuple[TensorInfo, tuple[int, int]]:
    if not isinstance(entry, dict):
        raise CheckpointError(f"{path}: tensor {key!r}: entry is not an object")
    dtype = entry.get("dtype")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise CheckpointError(f"{path}: tensor {key!r}: unknown dtype {dtype!r}")
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise CheckpointError(f"{path}: tensor {key!r}: shape {shape!r} is not a list of sizes")
    span = entry.get("data_offsets")
    if (
        not isinstance(span, list)
        or len(span) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in span)
    ):
        raise CheckpointError(f"{path}: tensor {key!r}: data_offsets {span!r} is not [begin, end]")
    begin, end = span
    if not 0 <= begin <= end <= data_size:
        raise CheckpointError(
            f"{path}: tensor {key!r}: data_offsets [{begin}, {end}] are outside the "
            f"{data_size}-byte data section (truncated file?)"
        )
    info = TensorInfo(name=key, shape=tuple(shape), dtype=dtype, file=path)
    numel_bits = info.numel * DTYPE_BITS[dtype]
    if numel_bits % 8 or end - begin != numel_bits // 8:
        raise CheckpointError(
            f"{path}: tensor {key!r}: {dtype}{list(shape)} needs {numel_bits / 8:g} bytes, "
            f"data_offsets give {end - begin}"
        )
    return info, (begin, end)


def _check_no_overlap(path: str, offsets: dict[str, tuple[int, int]]) -> None:
    previous_end, previous = 0, ""
    for key, (begin, end) in sorted(offsets.items(), key=lambda kv: kv[1]):
        if begin < previous_end:
            raise CheckpointError(f"{path}: tensors {previous!r} and {key!r} overlap")
        if end > begin:
            previous_end, previous = end, key


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
