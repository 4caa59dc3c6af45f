"""Tiny real HuggingFace checkpoints for the ckpt tests (random weights, saved by transformers)."""

from __future__ import annotations

import os

import torch

SIZES = dict(
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=128,
)


def make_model(kind: str, *, layers: int = 2, tied: bool = False, seed: int = 0) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    config_cls = {"llama": LlamaConfig, "qwen2": Qwen2Config}[kind]
    config = config_cls(num_hidden_layers=layers, tie_word_embeddings=tied, **SIZES)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # biases start at zero: make them visible in round trips
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_()
    return model.eval()


def save(model: torch.nn.Module, path: str, *, shard: str | None = None) -> str:
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(path, safe_serialization=True, **kwargs)  # type: ignore[operator]
    return os.fspath(path)
