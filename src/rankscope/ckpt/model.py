"""Typed records of what a checkpoint holds, without its tensor data, and of what we report.

Every reader (safetensors header, torch file, config.json, live module) produces a `Manifest`;
analysis turns manifests into the records that reach the user (`Inspection`, `CkptDiff` with
its `Explanation`s), and rendering only ever sees these dataclasses.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

from rankscope.ckpt.schemes import SchemeInfo

__all__ = [
    "DTYPE_BITS",
    "CkptDiff",
    "DtypeMismatch",
    "Explanation",
    "ExplanationKind",
    "Inspection",
    "Manifest",
    "ModelDims",
    "ShapeMismatch",
    "SourceKind",
    "TensorInfo",
    "TpEvidence",
]

DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}
"""Bits per element of every dtype a safetensors header may name."""


class SourceKind(str, enum.Enum):
    """Where a manifest came from."""

    SAFETENSORS = "safetensors"
    """One `.safetensors` file, read from its header."""
    SAFETENSORS_SHARDED = "safetensors-sharded"
    """Several `.safetensors` files, usually listed by `model.safetensors.index.json`."""
    TORCH = "torch"
    """A `.bin` / `.pt` file read with `torch.load(weights_only=True, mmap=True)`."""
    MCORE_TP = "mcore-tp"
    """A folder of `mp_rank_NN/` tensor-parallel shards (manifest of rank 0)."""
    MCORE_DIST = "mcore-torch-dist"
    """Megatron-core `torch_dist` checkpoint: global shapes from `.metadata`, layers unstacked."""
    MCORE_LEGACY = "mcore-legacy"
    """Megatron `mp_rank_NN[_PPP]/model_optim_rng.pt` (rank 0's shards, layers renumbered)."""
    CONFIG = "config"
    """A HuggingFace `config.json`: the keys and shapes the model it describes expects."""
    LIVE = "live"
    """An `nn.Module` or state_dict handed over from Python."""


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's name, shape and dtype (safetensors code, e.g. `BF16`; None: unknown)."""

    name: str
    shape: tuple[int, ...]
    dtype: str | None
    file: str = ""

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        bits = DTYPE_BITS.get(self.dtype or "", 0)
        return self.numel * bits // 8


@dataclass(frozen=True)
class ModelDims:
    """The sizes of a Llama/Qwen2-style decoder, from its config.json."""

    model_type: str
    num_layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    qkv_bias: bool
    experts: int = 0
    """Routed experts per layer (Mixture-of-Experts); 0 for a dense MLP."""
    moe_intermediate: int = 0
    shared_intermediate: int = 0
    """Qwen2-MoE's shared expert; 0 when there is none."""

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} ({getattr(self, name)}) must be positive")
        if self.heads % self.kv_heads:
            raise ValueError(
                f"num_attention_heads ({self.heads}) must be a multiple of "
                f"num_key_value_heads ({self.kv_heads})"
            )


@dataclass
class Manifest:
    """Every tensor of a checkpoint (or of the model a config describes), in file order."""

    source: str
    kind: SourceKind
    tensors: dict[str, TensorInfo]
    files: tuple[str, ...] = ()
    metadata: dict[str, str] = field(default_factory=dict)
    dims: ModelDims | None = None
    tp_size: int | None = None
    """Tensor-parallel size when the layout says so (mp_rank_NN folders, rankscope metadata)."""
    extra_state: list[str] = field(default_factory=list)
    """Transformer Engine / Megatron `_extra_state` entries: module state, not weights."""
    other_objects: list[str] = field(default_factory=list)
    """Other non-tensor entries of a Megatron checkpoint (sharded objects)."""


@dataclass(frozen=True)
class TpEvidence:
    """Why we think a checkpoint is one tensor-parallel shard."""

    tp_size: int
    reason: str


@dataclass
class Inspection:
    """What `ckpt inspect` reports."""

    source: str
    kind: SourceKind
    tensor_count: int
    total_params: int
    total_bytes: int
    dtype_params: dict[str, int]
    scheme: SchemeInfo
    tensor_parallel: TpEvidence | None
    files: int
    tensors: list[TensorInfo] = field(default_factory=list)
    extra_state: int = 0
    """`_extra_state` entries recognised (not counted as tensors)."""
    notes: list[str] = field(default_factory=list)
    """What the reader recognised: backend, stacked layers, pipeline stages, allowed classes."""


class ExplanationKind(str, enum.Enum):
    """Why expected and actual differ."""

    NAMING_SCHEME = "naming-scheme"
    """HuggingFace names on one side, Megatron-core names on the other."""
    PREFIX = "prefix"
    """The same names under a wrapper prefix (`module.`, `_orig_mod.`, `model.`)."""
    TENSOR_PARALLEL = "tensor-parallel"
    """Shapes are the expected ones divided by N along one dimension."""
    VOCAB = "vocab"
    """Embedding rows differ: another tokenizer, or vocabulary padding."""
    FUSED_SPLIT = "fused-split"
    """Fused tensors (qkv, gate_up) on one side, split ones on the other."""
    LAYER_COUNT = "layer-count"
    """Another number of layers: a pipeline stage, or a config for another size."""
    TIED_EMBEDDINGS = "tied-embeddings"
    """One side ties the output layer to the embeddings, the other does not."""
    RENAMED = "renamed"
    """A missing and an unexpected tensor with the same shape: probably renamed."""
    DROPPED = "dropped"
    """Expected tensors that are not there under any name."""
    EXTRA = "extra"
    """Tensors the expected side does not have."""
    SHAPE = "shape"
    """Other shape mismatches."""
    DTYPE = "dtype"
    """Same tensors stored in another dtype."""


@dataclass(frozen=True)
class Explanation:
    """One cause, the keys it covers (a few quoted) and what to do."""

    kind: ExplanationKind
    message: str
    fix: str | None
    count: int
    examples: tuple[str, ...]


@dataclass(frozen=True)
class ShapeMismatch:
    name: str
    expected: tuple[int, ...]
    actual: tuple[int, ...]


@dataclass(frozen=True)
class DtypeMismatch:
    name: str
    expected: str
    actual: str


@dataclass
class CkptDiff:
    """What `ckpt diff` reports; `matches` is False when the checkpoint would not load."""

    expected: str
    actual: str
    expected_scheme: SchemeInfo
    actual_scheme: SchemeInfo
    matched: int
    missing: list[str]
    unexpected: list[str]
    shape_mismatches: list[ShapeMismatch]
    dtype_mismatches: list[DtypeMismatch]
    explanations: list[Explanation]

    @property
    def matches(self) -> bool:
        return not (
            self.missing or self.unexpected or self.shape_mismatches or self.dtype_mismatches
        )
