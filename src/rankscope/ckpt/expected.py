"""What a HuggingFace config.json expects: tensor names and shapes, without any weights.

With transformers installed, the model is built on the meta device (any architecture it knows);
without it, rankscope's own tables cover the Llama and Qwen2 families.
"""

from __future__ import annotations

import json
import os
from typing import Any

from rankscope.ckpt.model import Manifest, ModelDims, SourceKind, TensorInfo
from rankscope.errors import CheckpointError

__all__ = ["dims_from_config", "dims_of_folder", "manifest_from_config", "table_tensors"]

FAMILIES = ("llama", "qwen2")
"""Model types rankscope knows without transformers, and converts."""
CONVERTS = (*FAMILIES, "qwen2_moe", "mixtral")
"""Model types `convert` handles (the MoE ones to and from torch_dist only)."""


def read_config(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: cannot read the config: {exc}") from None
    if not isinstance(doc, dict) or "model_type" not in doc:
        raise CheckpointError(f"{path}: not a HuggingFace config.json (no model_type)")
    return doc


def dims_from_config(config: dict[str, Any], *, path: str) -> ModelDims:
    """Sizes of a Llama/Qwen2-style decoder; a clear error for anything else."""
    model_type = str(config.get("model_type"))
    try:
        hidden = int(config["hidden_size"])
        heads = int(config["num_attention_heads"])
        dims = ModelDims(
            model_type=model_type,
            num_layers=int(config["num_hidden_layers"]),
            hidden=hidden,
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            intermediate=int(config["intermediate_size"]),
            vocab=int(config["vocab_size"]),
            tied_embeddings=bool(config.get("tie_word_embeddings", False)),
            qkv_bias=model_type in ("qwen2", "qwen2_moe")
            or bool(config.get("attention_bias", False)),
            experts=int(config.get("num_experts") or config.get("num_local_experts") or 0),
            moe_intermediate=int(
                config.get("moe_intermediate_size" if model_type == "qwen2_moe" else "")
                or config.get("intermediate_size")
                or 0
            ),
            shared_intermediate=int(config.get("shared_expert_intermediate_size") or 0),
        )
    except KeyError as exc:
        raise CheckpointError(f"{path}: {model_type} config has no {exc.args[0]}") from None
    except (TypeError, ValueError, ZeroDivisionError) as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    return dims


def dims_of_folder(folder: str) -> ModelDims | None:
    """Dims from `folder/config.json` when it describes a Llama/Qwen2 model, else None."""
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        return None
    try:
        config = read_config(path)
        return dims_from_config(config, path=path) if config["model_type"] in FAMILIES else None
    except CheckpointError:
        return None


def manifest_from_config(path: str, *, use_transformers: bool | None = None) -> Manifest:
    """Expected tensors of the model `path` describes (dtype left unknown: loading casts)."""
    config = read_config(path)
    dims = dims_from_config(config, path=path) if config["model_type"] in FAMILIES else None
    if use_transformers is None:
        use_transformers = _have_transformers()
    if use_transformers:
        tensors = _transformers_tensors(config, path)
    elif dims is not None:
        tensors = table_tensors(dims)
    else:
        raise CheckpointError(
            f"{path}: model_type {config['model_type']!r} needs transformers installed "
            f"(rankscope's own tables cover {', '.join(FAMILIES)})"
        )
    return Manifest(
        source=path,
        kind=SourceKind.CONFIG,
        tensors={t.name: TensorInfo(t.name, t.shape, None, path) for t in tensors},
        files=(path,),
        dims=dims,
    )


def table_tensors(dims: ModelDims) -> list[TensorInfo]:
    """HuggingFace names and shapes of a Llama/Qwen2 causal LM, in state_dict order."""
    h, hd, inter = dims.hidden, dims.head_dim, dims.intermediate
    q, kv = dims.heads * hd, dims.kv_heads * hd
    out: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (dims.vocab, h))]
    for i in range(dims.num_layers):
        p = f"model.layers.{i}."
        out += [(p + "self_attn.q_proj.weight", (q, h))]
        out += [(p + "self_attn.q_proj.bias", (q,))] if dims.qkv_bias else []
        out += [(p + "self_attn.k_proj.weight", (kv, h))]
        out += [(p + "self_attn.k_proj.bias", (kv,))] if dims.qkv_bias else []
        out += [(p + "self_attn.v_proj.weight", (kv, h))]
        out += [(p + "self_attn.v_proj.bias", (kv,))] if dims.qkv_bias else []
        out += [(p + "self_attn.o_proj.weight", (h, q))]
        if dims.qkv_bias and dims.model_type == "llama":
            out += [(p + "self_attn.o_proj.bias", (h,))]
        out += [
            (p + "mlp.gate_proj.weight", (inter, h)),
            (p + "mlp.up_proj.weight", (inter, h)),
            (p + "mlp.down_proj.weight", (h, inter)),
            (p + "input_layernorm.weight", (h,)),
            (p + "post_attention_layernorm.weight", (h,)),
        ]
    out.append(("model.norm.weight", (h,)))
    if not dims.tied_embeddings:
        out.append(("lm_head.weight", (dims.vocab, h)))
    return [TensorInfo(name, shape, None) for name, shape in out]


def _have_transformers() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def _transformers_tensors(config: dict[str, Any], path: str) -> list[TensorInfo]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    kwargs = {k: v for k, v in config.items() if k != "model_type"}
    try:
        hf_config = AutoConfig.for_model(config["model_type"], **kwargs)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf_config)
    except (ValueError, KeyError, TypeError) as exc:
        first = str(exc).strip().splitlines()[0][:160]
        raise CheckpointError(f"{path}: transformers cannot build this model: {first}") from None
    state = model.state_dict()
    if getattr(hf_config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    return [TensorInfo(name, tuple(t.shape), None) for name, t in state.items()]
