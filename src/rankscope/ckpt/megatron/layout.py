"""Where every tensor of a Megatron-core GPT lives in a `torch_dist` checkpoint. Pure, no torch.

Megatron's `sharded_state_dict()` stacks per-layer tensors under one key with the layer as the
leading axis (`decoder.layers.self_attention.linear_qkv.weight`: `[layers, rows, hidden]`), keys
the local layer spec's separate norms under the Transformer-Engine names
(`input_layernorm` -> `linear_qkv.layer_norm_weight`), stores the SwiGLU `linear_fc1` as the global
`[gate; up]` (tensor-parallel rank r holds gate chunk r and up chunk r), pads the vocabulary to a
multiple of `make_vocab_size_divisible_by * tp`, and adds one `_extra_state` object per layer and
linear (`<key>/shard_<layer>_<layers>`). Each chunk below is what one rank writes.

Example: `dist_layout(dims, tp=2, pp=1, vocab_divisible_by=128)[0].shape`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from rankscope.ckpt.mapping import RULES, Rule, TpSplit
from rankscope.ckpt.model import ModelDims

__all__ = [
    "EXTRA_STATE_LINEARS",
    "DistEntry",
    "dist_layout",
    "extra_state_keys",
    "padded_vocab",
    "stacked_key",
]

EXTRA_STATE_LINEARS = (
    "self_attention.linear_proj",
    "self_attention.linear_qkv",
    "mlp.linear_fc1",
    "mlp.linear_fc2",
)
"""The layer linears whose `_extra_state` Megatron saves as a sharded object."""

Chunk = tuple[tuple[int, ...], tuple[int, ...]]
"""(global offsets, sizes) of one stored piece."""


@dataclass(frozen=True)
class DistEntry:
    """One tensor of the checkpoint: its key, rule, global shape and stored chunks."""

    key: str
    rule: Rule
    shape: tuple[int, ...]
    chunks: tuple[Chunk, ...]

    @property
    def layered(self) -> bool:
        return self.rule.per_layer

    @property
    def per_expert(self) -> bool:
        return self.rule.per_expert


def stacked_key(rule: Rule) -> str:
    """`decoder.layers.{i}.x` -> `decoder.layers.x` (the key Megatron's sharded state dict uses);
    experts: `...mlp.experts.local_experts.{e}.x` -> `...mlp.experts.experts.x`."""
    return rule.mcore.replace("{i}.", "").replace("local_experts.{e}.", "experts.")


def padded_vocab(vocab: int, divisible_by: int, tp: int) -> int:
    """Megatron-LM's padded vocabulary: the next multiple of `divisible_by * tp`."""
    if divisible_by < 1 or tp < 1:
        raise ValueError(
            f"make_vocab_size_divisible_by ({divisible_by}) and tp ({tp}) must be >= 1"
        )
    multiple = divisible_by * tp
    return -(-vocab // multiple) * multiple


def _rule_shape(rule: Rule, dims: ModelDims, vocab: int) -> tuple[int, ...]:
    h, hd = dims.hidden, dims.head_dim
    qkv = (dims.heads + 2 * dims.kv_heads) * hd
    moe, shared = dims.moe_intermediate, dims.shared_intermediate
    name = rule.mcore.removeprefix("decoder.layers.{i}.")
    return {
        "embedding.word_embeddings.weight": (vocab, h),
        "self_attention.linear_qkv.layer_norm_weight": (h,),
        "self_attention.linear_qkv.weight": (qkv, h),
        "self_attention.linear_qkv.bias": (qkv,),
        "self_attention.linear_proj.weight": (h, dims.heads * hd),
        "mlp.linear_fc1.layer_norm_weight": (h,),
        "mlp.linear_fc1.weight": (2 * dims.intermediate, h),
        "mlp.linear_fc2.weight": (h, dims.intermediate),
        "mlp.router.weight": (dims.experts, h),
        "mlp.experts.local_experts.{e}.linear_fc1.weight": (2 * moe, h),
        "mlp.experts.local_experts.{e}.linear_fc2.weight": (h, moe),
        "mlp.shared_experts.linear_fc1.weight": (2 * shared, h),
        "mlp.shared_experts.linear_fc2.weight": (h, shared),
        "mlp.shared_experts.gate_weight": (1, h),
        "decoder.final_layernorm.weight": (h,),
        "output_layer.weight": (vocab, h),
    }[name]


def _tp_chunks(shape: tuple[int, ...], split: TpSplit, tp: int) -> list[Chunk]:
    """The pieces TP ranks hold of one (per-layer) tensor, offsets into that tensor."""
    zero = (0,) * len(shape)
    if split is TpSplit.REPLICATED or (tp == 1 and split is not TpSplit.GATE_UP):
        return [(zero, shape)]
    if split is TpSplit.GATE_UP:
        half = shape[0] // 2
        piece = half // tp
        rest = shape[1:]
        return [((r * piece, *zero[1:]), (piece, *rest)) for r in range(tp)] + [
            ((half + r * piece, *zero[1:]), (piece, *rest)) for r in range(tp)
        ]
    dim = 0 if split is TpSplit.COLUMN else 1
    piece = shape[dim] // tp
    out = []
    for r in range(tp):
        offsets = list(zero)
        offsets[dim] = r * piece
        sizes = list(shape)
        sizes[dim] = piece
        out.append((tuple(offsets), tuple(sizes)))
    return out


def dist_layout(
    dims: ModelDims,
    *,
    tp: int,
    vocab_divisible_by: int,
    with_bias: bool | None = None,
    rules: tuple[Rule, ...] = RULES,
) -> list[DistEntry]:
    """Every tensor a GPTModel of `dims` saves, in Megatron's order, with per-rank chunks."""
    vocab = padded_vocab(dims.vocab, vocab_divisible_by, tp)
    bias = dims.qkv_bias if with_bias is None else with_bias
    out = []
    for rule in rules:
        if rule.mcore.endswith("linear_qkv.bias") and not bias:
            continue
        if rule.mcore == "output_layer.weight" and dims.tied_embeddings:
            continue
        if ".shared_experts." in rule.mcore and not dims.shared_intermediate:
            continue
        shape = _rule_shape(rule, dims, vocab)
        pieces = _tp_chunks(shape, rule.tp, tp)
        if rule.per_expert:
            chunks = tuple(
                ((layer, e, *o), (1, 1, *s))
                for layer, e, (o, s) in itertools.product(
                    range(dims.num_layers), range(dims.experts), pieces
                )
            )
            shape = (dims.num_layers, dims.experts, *shape)
        elif rule.per_layer:
            chunks = tuple(
                ((layer, *o), (1, *s))
                for layer, (o, s) in itertools.product(range(dims.num_layers), pieces)
            )
            shape = (dims.num_layers, *shape)
        else:
            chunks = tuple(pieces)
        out.append(DistEntry(stacked_key(rule), rule, shape, chunks))
    return out


def extra_state_keys(dims: ModelDims) -> list[str]:
    """The `_extra_state` sharded objects Megatron's GPTModel saves (one per layer and linear;
    per layer and expert for routed experts: `shard_<layer>.<expert>_<layers>.<experts>`)."""
    n = dims.num_layers
    linears = list(EXTRA_STATE_LINEARS)
    out = []
    if dims.experts:
        linears = linears[:2] + (
            ["mlp.shared_experts.linear_fc1", "mlp.shared_experts.linear_fc2"]
            if dims.shared_intermediate
            else []
        )
        out = [
            f"decoder.layers.mlp.experts.experts.{fc}._extra_state/shard_{i}.{e}_{n}.{dims.experts}"
            for fc in ("linear_fc1", "linear_fc2")
            for i in range(n)
            for e in range(dims.experts)
        ]
    return [
        f"decoder.layers.{linear}._extra_state/shard_{layer}_{n}"
        for linear in linears
        for layer in range(n)
    ] + out
