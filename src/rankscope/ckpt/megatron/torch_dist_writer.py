"""Writing a Megatron-core `torch_dist` checkpoint on CPU through torch.distributed.checkpoint.

megatron-core 0.16's own saver cannot run on a CPU-only machine: its `FileSystemWriterAsync`
calls `torch.cuda.synchronize()` while preloading tensors (`filesystem_async.preload_tensors`),
and its placements say `cuda`. Here torch's own `FileSystemWriter` writes the `.distcp` files and
the `.metadata` plan (single process, `no_dist=True`) from a plan of every chunk each rank of a
`tp`-way run would write; a planner hands the writer one chunk at a time, built when asked
(`pieces.chunk_from_hf`), so memory stays near one chunk. Megatron's `metadata.json` (backend
`torch_dist`) and `common.pt` (an empty common state dict, as a bare GPTModel saves) go beside.

Example: `write_torch_dist(folder, layout, source, dims)`.
"""

from __future__ import annotations

import io
import json
import os
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rankscope.ckpt.megatron.layout import DistEntry, extra_state_keys
from rankscope.ckpt.megatron.pieces import chunk_from_hf
from rankscope.ckpt.model import ModelDims
from rankscope.errors import CheckpointError

if TYPE_CHECKING:
    from rankscope.ckpt.tensor_source import TensorSource

__all__ = ["METADATA_JSON", "write_torch_dist"]

METADATA_JSON = {
    "sharded_backend": "torch_dist",
    "sharded_backend_version": 1,
    "common_backend": "torch",
    "common_backend_version": 1,
}
"""What megatron-core's `save_config` writes for its default torch_dist strategy."""

Progress = Callable[[int, int], None]
"""Called with (bytes written so far, total bytes)."""


def write_torch_dist(
    folder: str,
    layout: list[DistEntry],
    source: TensorSource,
    dims: ModelDims,
    *,
    dtypes: dict[str, str],
    progress: Progress | None = None,
) -> list[str]:
    """Write every entry of `layout` from HuggingFace tensors in `source`; returns the files."""
    import torch
    import torch.distributed.checkpoint as dcp

    from rankscope.ckpt.safetensors_writer import DTYPE_OF_CODE

    torch_dtypes = {k: DTYPE_OF_CODE[v] for k, v in dtypes.items()}
    items, total = _plan_items(layout, torch_dtypes, dims)
    by_key = {e.key: e for e in layout}
    done = [0]

    def resolve(item: Any) -> Any:
        fqn, offsets = item.index.fqn, tuple(item.index.offset or ())
        if fqn not in by_key:
            buf = io.BytesIO()
            torch.save([None], buf)  # an empty Megatron _extra_state object
            buf.seek(0)
            return buf
        sizes = tuple(item.tensor_data.chunk.sizes)
        tensor = chunk_from_hf(by_key[fqn], source, dims, offsets, sizes)
        if tuple(tensor.shape) != sizes:
            raise CheckpointError(
                f"{source.path}: {fqn} chunk at {list(offsets)} is {list(tensor.shape)}, the "
                f"config implies {list(sizes)}"
            )
        if tensor.dtype != torch_dtypes[fqn]:
            raise ValueError(f"{fqn}: source dtype {tensor.dtype}, planned {torch_dtypes[fqn]}")
        done[0] += tensor.numel() * tensor.element_size()
        if progress is not None:
            progress(done[0], total)
        return tensor

    planner = _planner_class()(items, resolve)
    writer = dcp.FileSystemWriter(folder, single_file_per_rank=True, thread_count=1)
    with warnings.catch_warnings():  # "torch.distributed is disabled...": one process is meant
        warnings.simplefilter("ignore", UserWarning)
        try:
            dcp.save({}, storage_writer=writer, planner=planner, no_dist=True)
        except CheckpointError:
            raise
        except Exception as exc:  # DCP wraps what the planner raised: find ours
            for failure in getattr(exc, "failures", {}).values():
                inner = getattr(failure, "exception", failure)
                if isinstance(inner, CheckpointError):
                    raise inner from None
            raise
    with open(os.path.join(folder, "metadata.json"), "w", encoding="utf-8") as f:
        json.dump(METADATA_JSON, f)
    torch.save({}, os.path.join(folder, "common.pt"))
    return sorted(os.path.join(folder, n) for n in os.listdir(folder))


def _plan_items(
    layout: list[DistEntry], dtypes: dict[str, Any], dims: ModelDims
) -> tuple[list[Any], int]:
    import torch
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata,
        MetadataIndex,
        TensorProperties,
    )
    from torch.distributed.checkpoint.planner import TensorWriteData, WriteItem, WriteItemType

    items, total = [], 0
    for entry in layout:
        dtype = dtypes[entry.key]
        size_of = torch.empty((), dtype=dtype).element_size()
        for offsets, sizes in entry.chunks:
            items.append(
                WriteItem(
                    index=MetadataIndex(entry.key, torch.Size(offsets)),
                    type=WriteItemType.SHARD,
                    tensor_data=TensorWriteData(
                        chunk=ChunkStorageMetadata(torch.Size(offsets), torch.Size(sizes)),
                        properties=TensorProperties(dtype=dtype),
                        size=torch.Size(entry.shape),
                    ),
                )
            )
            total += size_of * int(torch.Size(sizes).numel())
    for key in extra_state_keys(dims):
        items.append(WriteItem(index=MetadataIndex(key), type=WriteItemType.BYTE_IO))
    return items, total


def _planner_class() -> type:
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
    from torch.distributed.checkpoint.planner import SavePlan

    class _ChunkPlanner(DefaultSavePlanner):
        """A save planner whose write items are planned up front and resolved one by one."""

        def __init__(self, items: list[Any], resolve: Callable[[Any], Any]) -> None:
            super().__init__(flatten_state_dict=False, flatten_sharded_tensors=False)
            self._items = items
            self._resolve = resolve

        def create_local_plan(self) -> SavePlan:
            self.plan = SavePlan(self._items)
            return self.plan

        def resolve_data(self, write_item: Any) -> Any:
            return self._resolve(write_item)

    return _ChunkPlanner
