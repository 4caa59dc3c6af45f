"""Which naming scheme a set of tensor names follows, and what wraps it.

Pure functions over names: HuggingFace Llama/Qwen2, Megatron-core GPT, wrapper prefixes
(DDP `module.`, torch.compile `_orig_mod.`, FSDP `_fsdp_wrapped_module.`), layers, tied embeddings.

Example: `detect_scheme(names).scheme is Scheme.HF_LLAMA`.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Scheme", "SchemeInfo", "Wrapper", "detect_scheme", "strip_wrappers"]


class Scheme(str, enum.Enum):
    """A family of tensor names."""

    HF_LLAMA = "hf-llama"
    """HuggingFace Llama-style: model.layers.N.self_attn.q_proj.weight, no q/k/v biases."""
    HF_QWEN2 = "hf-qwen2"
    """HuggingFace Qwen2-style: Llama names plus q/k/v biases."""
    MCORE_GPT = "mcore-gpt"
    """Megatron-core GPT: decoder.layers.N.self_attention.linear_qkv.weight."""
    UNKNOWN = "unknown"
    """Neither: some other architecture."""

    @property
    def family(self) -> str:
        return {"hf-llama": "HuggingFace", "hf-qwen2": "HuggingFace"}.get(
            self.value, "Megatron-core" if self is Scheme.MCORE_GPT else "unknown"
        )


class Wrapper(str, enum.Enum):
    """Name parts added by training wrappers, and who adds them."""

    DDP = "module."
    """DistributedDataParallel (and DeepSpeed) wrap the model as `.module`."""
    COMPILE = "_orig_mod."
    """torch.compile keeps the original module as `._orig_mod`."""
    FSDP = "_fsdp_wrapped_module."
    """FSDP1 wraps each sharded submodule."""
    CHECKPOINT = "_checkpoint_wrapped_module."
    """Activation checkpointing wrapper."""

    @property
    def who(self) -> str:
        return {
            Wrapper.DDP: "DDP",
            Wrapper.COMPILE: "torch.compile",
            Wrapper.FSDP: "FSDP",
            Wrapper.CHECKPOINT: "activation checkpointing",
        }[self]


@dataclass(frozen=True)
class SchemeInfo:
    """What `detect_scheme` found."""

    scheme: Scheme
    wrappers: tuple[Wrapper, ...]
    layer_count: int
    first_layer: int | None
    last_layer: int | None
    tied_embeddings: bool | None
    """True: embeddings present and no output layer; None: cannot tell."""
    base_model: bool
    """HuggingFace names without the `model.` prefix (a LlamaModel, not a ForCausalLM)."""

    @property
    def label(self) -> str:
        text = self.scheme.value
        if self.wrappers:
            text += " wrapped by " + ", ".join(w.who for w in self.wrappers)
        return text


_HF_LAYER = re.compile(r"^(model\.)?layers\.(\d+)\.")
_MCORE_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.")


def strip_wrappers(name: str) -> tuple[str, tuple[Wrapper, ...]]:
    """`name` without wrapper parts, and which were there."""
    found = []
    if name.startswith(Wrapper.DDP.value):
        name = name[len(Wrapper.DDP.value) :]
        found.append(Wrapper.DDP)
    for w in (Wrapper.COMPILE, Wrapper.FSDP, Wrapper.CHECKPOINT):
        if w.value in name:
            name = name.replace(w.value, "")
            found.append(w)
    return name, tuple(found)


def detect_scheme(names: Iterable[str]) -> SchemeInfo:
    """Scheme, wrappers, layers and tied embeddings of a set of tensor names."""
    clean: set[str] = set()
    wrappers: set[Wrapper] = set()
    for n in names:
        stripped, found = strip_wrappers(n)
        clean.add(stripped)
        wrappers.update(found)
    hf_layers = {int(m.group(2)) for n in clean if (m := _HF_LAYER.match(n))}
    mcore_layers = {int(m.group(1)) for n in clean if (m := _MCORE_LAYER.match(n))}
    hf_hits = sum(1 for n in clean if ".self_attn." in n or "embed_tokens" in n)
    mcore_hits = sum(1 for n in clean if ".self_attention." in n or "word_embeddings" in n)
    tied: bool | None = None
    base_model = False
    if mcore_hits > hf_hits:
        scheme, layers = Scheme.MCORE_GPT, mcore_layers
        if "embedding.word_embeddings.weight" in clean:
            tied = "output_layer.weight" not in clean
    elif hf_hits:
        has_bias = any(n.endswith("self_attn.q_proj.bias") for n in clean)
        scheme, layers = (Scheme.HF_QWEN2 if has_bias else Scheme.HF_LLAMA), hf_layers
        base_model = "embed_tokens.weight" in clean or (
            bool(hf_layers) and not any(n.startswith("model.") for n in clean)
        )
        embed = "embed_tokens.weight" if base_model else "model.embed_tokens.weight"
        if embed in clean and not base_model:
            tied = "lm_head.weight" not in clean
    else:
        scheme, layers = Scheme.UNKNOWN, hf_layers | mcore_layers
    order = [w for w in Wrapper if w in wrappers]
    return SchemeInfo(
        scheme=scheme,
        wrappers=tuple(order),
        layer_count=len(layers),
        first_layer=min(layers) if layers else None,
        last_layer=max(layers) if layers else None,
        tied_embeddings=tied,
        base_model=base_model,
    )
