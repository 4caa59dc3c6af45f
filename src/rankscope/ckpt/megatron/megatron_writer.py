"""Writing Megatron's own formats from a HuggingFace checkpoint: `torch_dist` and legacy.

`torch_dist` goes through `torch_dist_writer` (one chunk in memory at a time). Legacy writes one
`mp_rank_NN[_PPP]/model_optim_rng.pt` per tensor- and pipeline-parallel rank with
`{"model": state_dict, "checkpoint_version": 3.0, "iteration": 0}`: the Transformer-Engine layer
spec's names (`linear_qkv.layer_norm_weight`; Megatron-LM's default), layers numbered from 0 in
each stage, an empty `_extra_state` per TE module (linears, core attention), the vocabulary
padded; one rank's state dict is in memory at a time. No `args`: Megatron-LM must be started
with the model's arguments (not `--use-checkpoint-args`).

Example: `write_megatron("torch_dist", tmp, steps, source, dims, tp=2, pp=1, ...)`.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING

from rankscope.ckpt.mapping import Step
from rankscope.ckpt.megatron.layout import EXTRA_STATE_LINEARS, dist_layout, padded_vocab
from rankscope.ckpt.megatron.torch_dist_writer import Progress, write_torch_dist
from rankscope.ckpt.model import ModelDims
from rankscope.errors import CheckpointError

if TYPE_CHECKING:
    from rankscope.ckpt.tensor_source import TensorSource

__all__ = ["write_megatron"]


def write_megatron(
    fmt: str,
    folder: str,
    steps: list[Step],
    source: TensorSource,
    dims: ModelDims,
    *,
    tp: int,
    pp: int,
    vocab_divisible_by: int,
    progress: Progress | None = None,
) -> list[str]:
    """Write `steps` (an HF-to-mcore plan) in Megatron's `fmt` into `folder`; returns files."""
    present = {s.rule.mcore for s in steps}
    dims = replace(
        dims,
        tied_embeddings="output_layer.weight" not in present,
        qkv_bias=any(m.endswith("linear_qkv.bias") for m in present),
    )
    if fmt == "legacy":
        return _write_legacy(folder, steps, source, dims, tp, pp, vocab_divisible_by)
    rules = tuple(dict.fromkeys(s.rule for s in steps))
    dims = replace(
        dims,
        shared_intermediate=dims.shared_intermediate
        if any(".shared_experts." in m for m in present)
        else 0,
    )
    layout = dist_layout(dims, tp=tp, vocab_divisible_by=vocab_divisible_by, rules=rules)
    first = {s.rule.mcore.replace("{i}.", ""): s.source[0] for s in steps}
    dtypes = {
        e.key: str(source.infos[first[e.rule.mcore.replace("{i}.", "")]].dtype) for e in layout
    }
    return write_torch_dist(folder, layout, source, dims, dtypes=dtypes, progress=progress)


def _write_legacy(
    folder: str,
    steps: list[Step],
    source: TensorSource,
    dims: ModelDims,
    tp: int,
    pp: int,
    divisible_by: int,
) -> list[str]:
    import torch

    from rankscope.ckpt.tensors import fuse, split_tp

    if dims.num_layers % pp:
        raise CheckpointError(
            f"--pp {pp}: the {dims.num_layers} layers do not split evenly into stages"
        )
    if pp > 1 and dims.tied_embeddings:
        raise CheckpointError("--format legacy --pp > 1 with tied embeddings is not supported")
    per_stage = dims.num_layers // pp
    vocab = padded_vocab(dims.vocab, divisible_by, tp)
    files = []
    for stage in range(pp):
        first, last = stage * per_stage, (stage + 1) * per_stage
        for rank in range(tp):
            state: dict[str, object] = {}
            for step in steps:
                if step.layer is None:
                    is_head = step.rule.mcore != "embedding.word_embeddings.weight"
                    if (stage != pp - 1) if is_head else (stage != 0):
                        continue
                elif not first <= step.layer < last:
                    continue
                whole = fuse([source.get(n) for n in step.source], step.rule.fuse, dims)
                if step.rule.mcore in ("embedding.word_embeddings.weight", "output_layer.weight"):
                    pad = torch.zeros((vocab - whole.shape[0], *whole.shape[1:]), dtype=whole.dtype)
                    whole = torch.cat([whole, pad])
                name = step.mcore
                if step.layer is not None:
                    name = step.rule.mcore.format(i=step.layer - first)
                    for module in (*EXTRA_STATE_LINEARS, "self_attention.core_attention"):
                        state[f"decoder.layers.{step.layer - first}.{module}._extra_state"] = None
                state[name] = split_tp(whole, step.rule.tp, tp)[rank].clone()
            sub = f"mp_rank_{rank:02d}" + (f"_{stage:03d}" if pp > 1 else "")
            os.makedirs(os.path.join(folder, sub))
            path = os.path.join(folder, sub, "model_optim_rng.pt")
            torch.save({"model": state, "checkpoint_version": 3.0, "iteration": 0}, path)
            files.append(path)
    return files
