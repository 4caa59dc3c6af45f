"""Memory per GPU before launch: the actor's training step and the rollout, by formula.

The formulas (bytes per GPU; docs/ARCHITECTURE.md repeats them). P parameters, L layers,
h hidden, q = heads x head_dim, kv = KV heads x head_dim, I the MLP width, V the vocabulary;
W = nnodes x n_gpus_per_node GPUs, FSDP shards over all of them; sp the Ulysses size.

    params      4 P / W         fp32 master weights (0 with param_offload)
    grads       4 P / W         fp32 gradients (0 with param_offload)
    optimizer   8 P / W         Adam's two fp32 moments (0 with optimizer_offload)
    gathered    2 x 2 x P_layer one layer all-gathered in bf16, and the next one prefetched
    tokens      T = micro x (max_prompt_length + max_response_length) / sp
                (use_dynamic_bsz: T = ppo_max_token_len_per_gpu / sp)
    A           2 x (4h + q + 2kv + q + 4I) bytes per token per layer: the bf16 tensors a
                layer keeps for backward (norm, attention and MLP inputs, q/k/v, attention
                output, gate/up/act/product of the gated MLP; flash attention keeps no scores)
    activations L x A x T                     without gradient checkpointing
                L x 2h x T + A x T            with it (each layer's input, one layer redone)
                2h x T + A x T                with activation offload too (inputs on the CPU)
    logits      6 x T x V                     bf16 logits and their fp32 copy for log-probs
    train peak  params + grads + optimizer + gathered + activations + logits
                (+ the rollout's reserve when free_cache_engine is false)
    rollout     weights 2 P / tp; KV cache per token 2 x L x ceil(KV heads / tp) x head_dim x
                bytes(kv dtype); needed for train_batch_size x n / (W / tp) sequences of the
                maximum length; vLLM reserves gpu_memory_utilization x device memory
                (weights + needed KV when the device memory is unknown)
    rollout peak  params + optimizer (the actor stays resident) + the rollout's reserve
    peak        max(train peak, rollout peak), against 85% of the device memory
"""

from __future__ import annotations

import dataclasses
import math

from rankscope.doctor.config_lint.load import KEYS
from rankscope.doctor.config_lint.model import Knob, MemoryEstimate, ModelShape, Plan

__all__ = ["LIMIT", "estimate", "kv_bytes_per_token", "suggest_knobs"]

LIMIT = 0.85
"""Above this fraction of the device memory the estimate is a finding: the allocator's
fragmentation and CUDA's own context take the rest (the OOMs at 65-75% of nvidia-smi)."""
KV_BYTES = {
    "auto": 2,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}
WEIGHT_BYTES = {"bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2, "float32": 4}


def estimate(plan: Plan, model: ModelShape, device_bytes: float | None) -> MemoryEstimate:
    """Bytes per GPU by part, with the knobs that lower it when it passes `LIMIT`."""
    base = _estimate(plan, model, device_bytes)
    fraction = base.fraction
    if fraction is not None and fraction > LIMIT:
        return dataclasses.replace(base, knobs=tuple(suggest_knobs(plan, model, device_bytes)))
    return base


def kv_bytes_per_token(plan: Plan, model: ModelShape) -> float:
    """One token's K and V in every layer, on one GPU of the rollout's TP group."""
    heads = math.ceil(model.num_kv_heads / plan.rollout_tp)
    return 2 * model.num_layers * heads * model.head_dim * KV_BYTES.get(plan.kv_cache_dtype, 2)


def _tokens(plan: Plan) -> float:
    if plan.use_dynamic_bsz:
        return plan.ppo_max_token_len_per_gpu / plan.sequence_parallel
    micro = plan.ppo_micro_batch_size_per_gpu or 1
    return micro * plan.max_seq_len / plan.sequence_parallel


def _estimate(plan: Plan, m: ModelShape, device_bytes: float | None) -> MemoryEstimate:
    p, w = m.params, plan.world
    params = 0.0 if plan.param_offload else 4 * p / w
    grads = 0.0 if plan.param_offload else 4 * p / w
    optimizer = 0.0 if plan.optimizer_offload else 8 * p / w
    gathered = 2 * 2 * m.layer_params if w > 1 else 0.0
    t = _tokens(plan)
    h, q, kv = m.hidden_size, m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
    per_layer = 2 * (4 * h + q + 2 * kv + q + 4 * m.intermediate_size)
    if not plan.gradient_checkpointing:
        activations = m.num_layers * per_layer * t
    elif plan.activation_offload:
        activations = 2 * h * t + per_layer * t
    else:
        activations = m.num_layers * 2 * h * t + per_layer * t
    logits = 6 * t * m.vocab_size
    weights = WEIGHT_BYTES.get(plan.rollout_dtype, 2) * p / plan.rollout_tp
    replicas = max(1, w // plan.rollout_tp)
    sequences = math.ceil((plan.train_batch_size or 0) * plan.rollout_n / replicas)
    kv_needed = sequences * plan.max_seq_len * kv_bytes_per_token(plan, m)
    reserved = plan.gpu_memory_utilization * device_bytes if device_bytes else weights + kv_needed
    train = params + grads + optimizer + gathered + activations + logits
    if not plan.free_cache_engine:
        train += reserved
    rollout = params + optimizer + reserved
    return MemoryEstimate(
        params=params,
        grads=grads,
        optimizer=optimizer,
        gathered_layer=gathered,
        activations=activations,
        logits=logits,
        rollout_weights=weights,
        kv_cache_needed=kv_needed,
        rollout_reserved=reserved,
        train_peak=train,
        rollout_peak=rollout,
        device_bytes=device_bytes,
    )


def suggest_knobs(plan: Plan, m: ModelShape, device_bytes: float | None) -> list[Knob]:
    """Each knob applied alone to `plan`, with the peak after it; the biggest effect first
    (ties keep the order micro batch, gradient checkpointing, activation offload, KV cache
    dtype, TP size, gpu_memory_utilization). Knobs that do not lower the peak are left out."""
    before = _estimate(plan, m, device_bytes).peak
    target = LIMIT * device_bytes if device_bytes else before
    candidates: list[tuple[str, str, Plan]] = []
    if plan.use_dynamic_bsz:
        tokens = plan.ppo_max_token_len_per_gpu
        while (
            tokens > plan.max_seq_len
            and _peak(dataclasses.replace(plan, ppo_max_token_len_per_gpu=tokens), m, device_bytes)
            > target
        ):
            tokens //= 2
        tokens = max(tokens, plan.max_seq_len)
        candidates.append(
            (
                "micro batch",
                f"actor.ppo_max_token_len_per_gpu {plan.ppo_max_token_len_per_gpu} -> {tokens}",
                dataclasses.replace(plan, ppo_max_token_len_per_gpu=tokens),
            )
        )
    elif plan.ppo_micro_batch_size_per_gpu and plan.ppo_micro_batch_size_per_gpu > 1:
        micro = plan.ppo_micro_batch_size_per_gpu
        while (
            micro > 1
            and _peak(
                dataclasses.replace(plan, ppo_micro_batch_size_per_gpu=micro), m, device_bytes
            )
            > target
        ):
            micro //= 2
        candidates.append(
            (
                "micro batch",
                f"actor.ppo_micro_batch_size_per_gpu "
                f"{plan.ppo_micro_batch_size_per_gpu} -> {micro}",
                dataclasses.replace(plan, ppo_micro_batch_size_per_gpu=micro),
            )
        )
    if not plan.gradient_checkpointing:
        candidates.append(
            (
                "gradient checkpointing",
                "model.enable_gradient_checkpointing=true",
                dataclasses.replace(plan, gradient_checkpointing=True),
            )
        )
    if not plan.activation_offload:
        candidates.append(
            (
                "activation offload",
                "model.enable_activation_offload=true (with gradient checkpointing)",
                dataclasses.replace(plan, activation_offload=True, gradient_checkpointing=True),
            )
        )
    if KV_BYTES.get(plan.kv_cache_dtype, 2) > 1:
        candidates.append(
            (
                "KV cache dtype",
                "rollout.engine_kwargs.vllm.kv_cache_dtype=fp8",
                dataclasses.replace(plan, kv_cache_dtype="fp8"),
            )
        )
    if plan.rollout_tp * 2 <= plan.n_gpus_per_node and m.num_heads % (plan.rollout_tp * 2) == 0:
        candidates.append(
            (
                "TP size",
                f"rollout.tensor_model_parallel_size {plan.rollout_tp} -> {plan.rollout_tp * 2}",
                dataclasses.replace(plan, rollout_tp=plan.rollout_tp * 2),
            )
        )
    if device_bytes:
        util = _fitting_utilization(plan, m, device_bytes)
        if util is not None and util < plan.gpu_memory_utilization:
            candidates.append(
                (
                    "gpu_memory_utilization",
                    f"rollout.gpu_memory_utilization {plan.gpu_memory_utilization} -> {util}",
                    dataclasses.replace(plan, gpu_memory_utilization=util),
                )
            )
    knobs = [
        Knob(name, change, _peak(p, m, device_bytes), _changed(plan, p))
        for name, change, p in candidates
    ]
    return sorted(
        (k for k in knobs if k.peak_after_bytes < before), key=lambda k: k.peak_after_bytes
    )


def _changed(before: Plan, after: Plan) -> dict[str, object]:
    return {
        KEYS[f.name]: getattr(after, f.name)
        for f in dataclasses.fields(Plan)
        if getattr(after, f.name) != getattr(before, f.name)
    }


def _fitting_utilization(plan: Plan, m: ModelShape, device_bytes: float) -> float | None:
    """The largest gpu_memory_utilization (in steps of 0.05) that keeps the rollout phase
    under the limit and still holds the rollout's weights; None when none does."""
    e = _estimate(plan, m, device_bytes)
    room = (LIMIT * device_bytes - e.params - e.optimizer) / device_bytes
    util = math.floor(room * 20) / 20
    return util if util * device_bytes > e.rollout_weights else None


def _peak(plan: Plan, m: ModelShape, device_bytes: float | None) -> float:
    return _estimate(plan, m, device_bytes).peak
