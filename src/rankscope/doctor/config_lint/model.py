"""What `doctor --config` reads (the plan: the trainer config's keys that matter, the model's
shape, the cluster) and what it reports (one row per rule, the memory estimate)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rankscope.doctor.preflight.model import Status

__all__ = [
    "ClusterShape",
    "Knob",
    "LintReport",
    "MemoryEstimate",
    "ModelShape",
    "Plan",
    "RuleResult",
]


@dataclass(frozen=True)
class Plan:
    """The keys of a verl-style trainer config the rules read, with verl's defaults.

    `keys` maps each field to the config key it came from, so findings name the user's keys.
    """

    train_batch_size: int | None = None
    max_prompt_length: int = 512
    max_response_length: int = 512
    model_path: str | None = None
    gradient_checkpointing: bool = False
    activation_offload: bool = False
    ppo_mini_batch_size: int | None = None
    ppo_micro_batch_size_per_gpu: int | None = None
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = 16384
    sequence_parallel: int = 1
    param_offload: bool = False
    optimizer_offload: bool = False
    param_dtype: str = "bf16"
    rollout_n: int = 1
    rollout_tp: int = 2
    gpu_memory_utilization: float = 0.5
    free_cache_engine: bool = True
    rollout_dtype: str = "bfloat16"
    kv_cache_dtype: str = "auto"
    log_prob_micro_batch_size_per_gpu: int | None = None
    ref_log_prob_micro_batch_size_per_gpu: int | None = None
    critic_ppo_mini_batch_size: int | None = None
    critic_ppo_micro_batch_size_per_gpu: int | None = None
    nnodes: int = 1
    n_gpus_per_node: int = 8
    checkpoint_dir: str | None = None

    @property
    def world(self) -> int:
        return self.nnodes * self.n_gpus_per_node

    @property
    def max_seq_len(self) -> int:
        return self.max_prompt_length + self.max_response_length


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer from its config.json (Llama, Qwen2, Mistral shapes)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab_size: int
    head_dim: int
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    source: str = ""

    @property
    def params(self) -> int:
        """Embedding, per layer (q, k, v, o, gated MLP, two norms), final norm, lm head."""
        h, q, kv = (
            self.hidden_size,
            self.num_heads * self.head_dim,
            self.num_kv_heads * self.head_dim,
        )
        attention = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if self.qkv_bias else 0)
        layer = attention + 3 * h * self.intermediate_size + 2 * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.vocab_size * h + self.num_layers * layer + h + head

    @property
    def layer_params(self) -> int:
        h, q, kv = (
            self.hidden_size,
            self.num_heads * self.head_dim,
            self.num_kv_heads * self.head_dim,
        )
        return h * q + 2 * h * kv + q * h + 3 * h * self.intermediate_size + 2 * h


@dataclass(frozen=True)
class ClusterShape:
    """What the cluster offers: GPUs per node (Ray's GPU resource), their model and memory."""

    gpus_per_node: tuple[int, ...]
    gpu_names: tuple[str, ...] = ()
    gpu_memory_bytes: float | None = None
    shared_seen: dict[str, str] | None = None
    """The checkpoint dir on each node: "seen" (the sentinel), or why not; None: not asked."""


@dataclass(frozen=True)
class RuleResult:
    """One row of the lint table: a rule, its verdict, and for a finding the keys and values
    involved, the arithmetic, and the corrected value."""

    rule: str
    status: Status
    message: str
    keys: dict[str, Any] = field(default_factory=dict)
    fix: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Knob:
    """A change that lowers the peak, and the estimate after it."""

    name: str
    change: str
    peak_after_bytes: float
    changes: dict[str, Any] = field(default_factory=dict)
    """The config keys to change (full names) and their new values."""


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per GPU, by part; `peak` is the larger of the training and the rollout phase."""

    params: float
    grads: float
    optimizer: float
    gathered_layer: float
    activations: float
    logits: float
    rollout_weights: float
    kv_cache_needed: float
    rollout_reserved: float
    train_peak: float
    rollout_peak: float
    device_bytes: float | None
    knobs: tuple[Knob, ...] = ()

    @property
    def peak(self) -> float:
        return max(self.train_peak, self.rollout_peak)

    @property
    def fraction(self) -> float | None:
        return None if not self.device_bytes else self.peak / self.device_bytes


@dataclass(frozen=True)
class LintReport:
    config: str
    rules: tuple[RuleResult, ...]
    memory: MemoryEstimate | None
    model: ModelShape | None
    plan: Plan

    @property
    def failed(self) -> bool:
        return any(r.status == Status.FAIL for r in self.rules)
