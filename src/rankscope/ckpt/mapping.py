"""HuggingFace Llama/Qwen2 names <-> Megatron-core GPT names, and how each tensor is TP-split.

One table (`RULES`) drives conversion planning, name translation for `ckpt diff` explanations,
and the tensor-parallel split of every Megatron-core tensor. No torch here.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass

from rankscope.ckpt.model import TensorInfo
from rankscope.errors import CheckpointError

__all__ = [
    "MOE_RULES",
    "RULES",
    "Fuse",
    "Rule",
    "Step",
    "TpSplit",
    "layer_indices",
    "mcore_infos",
    "plan",
    "rules_for",
    "translate",
]


class Fuse(str, enum.Enum):
    """How HuggingFace tensors become one Megatron-core tensor."""

    COPY = "copy"
    """One tensor, unchanged."""
    QKV = "qkv"
    """q, k, v interleaved group by group: per key-value head, its query heads, then k, then v."""
    GATE_UP = "gate_up"
    """gate and up concatenated along dim 0."""


class TpSplit(str, enum.Enum):
    """How Megatron-core splits a tensor across tensor-parallel ranks."""

    REPLICATED = "replicated"
    """Every rank holds all of it (layer norms)."""
    COLUMN = "column"
    """Dim 0 in N contiguous chunks (column-parallel linears, vocab-parallel embedding)."""
    ROW = "row"
    """Dim 1 in N contiguous chunks (row-parallel linears)."""
    GATE_UP = "gate_up"
    """Column-parallel per half: rank r holds [gate chunk r; up chunk r]."""


class Direction(str, enum.Enum):
    HF_TO_MCORE = "hf-to-mcore"
    MCORE_TO_HF = "mcore-to-hf"


@dataclass(frozen=True)
class Rule:
    """One Megatron-core tensor and the HuggingFace tensors it is made of (`{i}`: layer)."""

    mcore: str
    hf: tuple[str, ...]
    fuse: Fuse
    tp: TpSplit
    optional: bool = False

    @property
    def per_layer(self) -> bool:
        return "{i}" in self.mcore

    @property
    def per_expert(self) -> bool:
        return "{e}" in self.mcore


_L = "model.layers.{i}."
_M = "decoder.layers.{i}."
RULES: tuple[Rule, ...] = (
    Rule(
        "embedding.word_embeddings.weight",
        ("model.embed_tokens.weight",),
        Fuse.COPY,
        TpSplit.COLUMN,
    ),
    Rule(
        _M + "self_attention.linear_qkv.layer_norm_weight",
        (_L + "input_layernorm.weight",),
        Fuse.COPY,
        TpSplit.REPLICATED,
    ),
    Rule(
        _M + "self_attention.linear_qkv.weight",
        tuple(_L + f"self_attn.{p}_proj.weight" for p in "qkv"),
        Fuse.QKV,
        TpSplit.COLUMN,
    ),
    Rule(
        _M + "self_attention.linear_qkv.bias",
        tuple(_L + f"self_attn.{p}_proj.bias" for p in "qkv"),
        Fuse.QKV,
        TpSplit.COLUMN,
        optional=True,
    ),
    Rule(
        _M + "self_attention.linear_proj.weight",
        (_L + "self_attn.o_proj.weight",),
        Fuse.COPY,
        TpSplit.ROW,
    ),
    Rule(
        _M + "mlp.linear_fc1.layer_norm_weight",
        (_L + "post_attention_layernorm.weight",),
        Fuse.COPY,
        TpSplit.REPLICATED,
    ),
    Rule(
        _M + "mlp.linear_fc1.weight",
        (_L + "mlp.gate_proj.weight", _L + "mlp.up_proj.weight"),
        Fuse.GATE_UP,
        TpSplit.GATE_UP,
    ),
    Rule(_M + "mlp.linear_fc2.weight", (_L + "mlp.down_proj.weight",), Fuse.COPY, TpSplit.ROW),
    Rule("decoder.final_layernorm.weight", ("model.norm.weight",), Fuse.COPY, TpSplit.REPLICATED),
    Rule("output_layer.weight", ("lm_head.weight",), Fuse.COPY, TpSplit.COLUMN, optional=True),
)

_DENSE_MLP = (_M + "mlp.linear_fc1.weight", _M + "mlp.linear_fc2.weight")
_X = "mlp.experts.local_experts.{e}."


def _moe_rules(router: str, experts: str, gate: str, up: str, down: str) -> tuple[Rule, ...]:
    """Dense rules without the dense MLP, plus the router and per-expert MLPs of `family`."""
    e = _L + experts + ".{e}."
    return (
        Rule(_M + "mlp.router.weight", (_L + router,), Fuse.COPY, TpSplit.REPLICATED),
        Rule(_M + _X + "linear_fc1.weight", (e + gate, e + up), Fuse.GATE_UP, TpSplit.GATE_UP),
        Rule(_M + _X + "linear_fc2.weight", (e + down,), Fuse.COPY, TpSplit.ROW),
    )


_SHARED = "mlp.shared_expert."
_QWEN2_SHARED = (
    Rule(
        _M + "mlp.shared_experts.linear_fc1.weight",
        (_L + _SHARED + "gate_proj.weight", _L + _SHARED + "up_proj.weight"),
        Fuse.GATE_UP,
        TpSplit.GATE_UP,
        optional=True,
    ),
    Rule(
        _M + "mlp.shared_experts.linear_fc2.weight",
        (_L + _SHARED + "down_proj.weight",),
        Fuse.COPY,
        TpSplit.ROW,
        optional=True,
    ),
    Rule(
        _M + "mlp.shared_experts.gate_weight",
        (_L + "mlp.shared_expert_gate.weight",),
        Fuse.COPY,
        TpSplit.REPLICATED,
        optional=True,
    ),
)
MOE_RULES: dict[str, tuple[Rule, ...]] = {
    "qwen2_moe": (
        *_moe_rules(
            "mlp.gate.weight",
            "mlp.experts",
            "gate_proj.weight",
            "up_proj.weight",
            "down_proj.weight",
        ),
        *_QWEN2_SHARED,
    ),
    "mixtral": _moe_rules(
        "block_sparse_moe.gate.weight",
        "block_sparse_moe.experts",
        "w1.weight",
        "w3.weight",
        "w2.weight",
    ),
}
"""Mixture-of-Experts layers: Qwen2-MoE (with shared experts) and Mixtral naming."""

_EXPERT = {
    Direction.HF_TO_MCORE: re.compile(r"\.(?:mlp|block_sparse_moe)\.experts\.(\d+)\."),
    Direction.MCORE_TO_HF: re.compile(r"\.mlp\.experts\.local_experts\.(\d+)\."),
}


def rules_for(names: Iterable[str], direction: Direction) -> tuple[tuple[Rule, ...], int]:
    """The rule table for a set of source names (dense, or a MoE family) and its expert count."""
    present = list(names)
    experts = {int(m.group(1)) for n in present if (m := _EXPERT[direction].search(n))}
    if not experts:
        return RULES, 0
    mixtral = any(".block_sparse_moe." in n for n in present) or (
        direction is Direction.MCORE_TO_HF and not any(".shared_experts." in n for n in present)
    )
    dense = tuple(r for r in RULES if r.mcore not in _DENSE_MLP)
    family = "mixtral" if mixtral else "qwen2_moe"
    ordered = dense[:6] + MOE_RULES[family] + dense[6:]
    return ordered, max(experts) + 1


_LAYER = {
    Direction.HF_TO_MCORE: re.compile(r"^model\.layers\.(\d+)\."),
    Direction.MCORE_TO_HF: re.compile(r"^decoder\.layers\.(\d+)\."),
}


@dataclass(frozen=True)
class Step:
    """One output tensor of a conversion: its name, the source names it reads, and its rule."""

    target: tuple[str, ...]
    source: tuple[str, ...]
    rule: Rule
    layer: int | None
    expert: int | None = None

    @property
    def mcore(self) -> str:
        return self.rule.mcore.format(i=self.layer, e=self.expert)

    @property
    def hf(self) -> tuple[str, ...]:
        return tuple(n.format(i=self.layer, e=self.expert) for n in self.rule.hf)


def layer_indices(names: Iterable[str], direction: Direction) -> list[int]:
    """Sorted layer numbers that appear in source-side names."""
    pattern = _LAYER[direction]
    return sorted({int(m.group(1)) for n in names if (m := pattern.match(n))})


def plan(names: Iterable[str], direction: Direction, *, source: str) -> list[Step]:
    """Every output tensor, in Megatron-core order; errors on partial or unmapped input."""
    present = set(names)
    consumed: set[str] = set()
    steps: list[Step] = []
    layers = layer_indices(present, direction)
    rules, experts = rules_for(present, direction)
    ordered: list[tuple[Rule, int | None, int | None]] = [(r, None, None) for r in rules[:1]]
    for i in layers:
        for r in rules:
            if r.per_layer:
                ordered += [(r, i, e) for e in (range(experts) if r.per_expert else [None])]
    ordered += [(r, None, None) for r in rules[1:] if not r.per_layer]
    for rule, layer, expert in ordered:
        mcore = (rule.mcore.format(i=layer, e=expert),)
        hf = tuple(n.format(i=layer, e=expert) for n in rule.hf)
        src, dst = (hf, mcore) if direction is Direction.HF_TO_MCORE else (mcore, hf)
        have = [n for n in src if n in present]
        if len(have) == len(src):
            steps.append(Step(target=dst, source=src, rule=rule, layer=layer, expert=expert))
            consumed.update(src)
        elif have:
            missing = ", ".join(n for n in src if n not in present)
            raise CheckpointError(f"{source}: has {have[0]} but not {missing}")
        elif not rule.optional:
            raise CheckpointError(
                f"{source}: tensor {src[0]} is missing: not a {direction.value.split('-')[0]} "
                "Llama/Qwen2 checkpoint? (`rankscope ckpt inspect` shows its naming scheme)"
            )
    leftover = sorted(present - consumed)
    if leftover:
        more = f" and {len(leftover) - 1} more" if len(leftover) > 1 else ""
        raise CheckpointError(
            f"{source}: tensor {leftover[0]}{more} has no counterpart in the {direction.value} "
            "mapping (Llama, Qwen2, Qwen2-MoE, Mixtral); nothing was written"
        )
    return steps


def translate(names: Iterable[str], direction: Direction) -> dict[str, str]:
    """Name-only translation for explanations: {target name: one source name it comes from}.

    Groups that are incomplete are skipped; shapes are not looked at.
    """
    present = set(names)
    out: dict[str, str] = {}
    layers = layer_indices(present, direction)
    rules, experts = rules_for(present, direction)
    for rule in rules:
        for layer, e in _positions(rule, layers, experts):
            mcore = (rule.mcore.format(i=layer, e=e),)
            hf = tuple(n.format(i=layer, e=e) for n in rule.hf)
            src, dst = (hf, mcore) if direction is Direction.HF_TO_MCORE else (mcore, hf)
            if all(n in present for n in src):
                for target in dst:
                    out[target] = src[0]
    return out


def mcore_infos(hf: dict[str, TensorInfo]) -> dict[str, TensorInfo]:
    """HuggingFace tensors as the Megatron-core tensors they make: names and global shapes.

    Fused tensors add up their rows (q+k+v, gate+up); groups that are incomplete are skipped.
    """
    out: dict[str, TensorInfo] = {}
    layers = layer_indices(hf, Direction.HF_TO_MCORE)
    rules, experts = rules_for(hf, Direction.HF_TO_MCORE)
    for rule in rules:
        for layer, e in _positions(rule, layers, experts):
            src = [hf.get(n.format(i=layer, e=e)) for n in rule.hf]
            if any(s is None for s in src):
                continue
            infos = [s for s in src if s is not None]
            shape = infos[0].shape
            if rule.fuse is not Fuse.COPY and shape:
                shape = (sum(i.shape[0] if i.shape else 0 for i in infos), *shape[1:])
            name = rule.mcore.format(i=layer, e=e)
            out[name] = TensorInfo(name, shape, infos[0].dtype, infos[0].file)
    return out


def _positions(rule: Rule, layers: list[int], experts: int) -> list[tuple[int | None, int | None]]:
    if not rule.per_layer:
        return [(None, None)]
    if rule.per_expert:
        return [(i, e) for i in layers for e in range(experts)]
    return [(i, None) for i in layers]
