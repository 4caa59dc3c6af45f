"""Tiny real HuggingFace checkpoints for the ckpt tests (random weights, saved by transformers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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


def safetensors_state(folder: str) -> dict[str, torch.Tensor]:
    """Every tensor of the folder's .safetensors files, by name."""
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            out.update(load_file(os.path.join(folder, name)))
    return out


# ----------------------------------------------------------------- megatron-core's own view
# Run in a subprocess (`python -c`): megatron-core needs a process group and parallel state, and
# importing it registers its classes as torch safe globals for the whole process.
MEGATRON_CHECK = """
import json, os, sys, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, {tests!r})
from _ckpt_models import megatron_checks
print("RESULT " + json.dumps(megatron_checks(*json.loads(sys.argv[1]))))
"""


def megatron_checks(cases: list, port: int) -> list:
    """`megatron_check` for each (hf, dst, padded_vocab), in one process group."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    try:
        return [megatron_check(*case) for case in cases]
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def megatron_check(hf: str, dst: str, padded_vocab: int) -> dict:
    """Build a GPTModel (local layer spec, CPU) for `hf`'s config, compare its sharded state dict
    with megatron-core's `load_tensors_metadata(dst)`, load `dst` into it with strict checking and
    return every parameter next to the HF tensors it was made of."""
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.mapping import ShardedTensor, ShardedTensorFactory
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig
    from safetensors.torch import load_file

    with open(os.path.join(hf, "config.json")) as f:
        c = json.load(f)
    config = TransformerConfig(
        num_layers=c["num_hidden_layers"],
        hidden_size=c["hidden_size"],
        num_attention_heads=c["num_attention_heads"],
        num_query_groups=c["num_key_value_heads"],
        ffn_hidden_size=c["intermediate_size"],
        gated_linear_unit=True,
        activation_func=torch.nn.functional.silu,
        normalization="RMSNorm",
        add_bias_linear=False,
        add_qkv_bias=c["model_type"] in ("qwen2", "qwen2_moe"),
        use_cpu_initialization=True,
        bias_activation_fusion=False,
        bias_dropout_fusion=False,
        masked_softmax_fusion=False,
        persist_layer_norm=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        layernorm_epsilon=c["rms_norm_eps"],
        **_moe_config(c),
    )
    experts = c.get("num_experts") or c.get("num_local_experts")
    model = GPTModel(
        config,
        get_gpt_layer_local_spec(
            num_experts=experts, moe_grouped_gemm=False, normalization="RMSNorm"
        ),
        vocab_size=padded_vocab,
        max_sequence_length=64,
        position_embedding_type="rope",
        share_embeddings_and_output_weights=c.get("tie_word_embeddings", False),
    )
    expected = {}
    for value in model.sharded_state_dict().values():
        if isinstance(value, ShardedTensorFactory):
            value = value.build()[0]
        if isinstance(value, ShardedTensor):
            expected[value.key] = list(value.global_shape)
    found = {
        k: list(v.global_shape) for k, v in dist_checkpointing.load_tensors_metadata(dst).items()
    }
    loaded = dist_checkpointing.load(model.sharded_state_dict(), dst, strict="raise_all")
    result = model.load_state_dict(loaded, strict=True)
    hf_state = {}
    for name in os.listdir(hf):
        if name.endswith(".safetensors"):
            hf_state.update(load_file(os.path.join(hf, name)))
    mismatched = []
    state = model.state_dict()
    for i in range(c["num_hidden_layers"] if not experts else 0):
        p, q = f"decoder.layers.{i}.", f"model.layers.{i}."
        heads, groups = c["num_attention_heads"], c["num_key_value_heads"]
        hd = c["hidden_size"] // heads
        qkv = [hf_state[f"{q}self_attn.{n}_proj.weight"] for n in "qkv"]
        grouped = [
            qkv[0].reshape(groups, heads // groups * hd, -1),
            qkv[1].reshape(groups, hd, -1),
            qkv[2].reshape(groups, hd, -1),
        ]
        pairs = {
            p + "input_layernorm.weight": hf_state[q + "input_layernorm.weight"],
            p + "pre_mlp_layernorm.weight": hf_state[q + "post_attention_layernorm.weight"],
            p + "self_attention.linear_qkv.weight": torch.cat(grouped, 1).reshape(
                -1, qkv[0].shape[1]
            ),
            p + "self_attention.linear_proj.weight": hf_state[q + "self_attn.o_proj.weight"],
            p + "mlp.linear_fc1.weight": torch.cat(
                [hf_state[q + "mlp.gate_proj.weight"], hf_state[q + "mlp.up_proj.weight"]]
            ),
            p + "mlp.linear_fc2.weight": hf_state[q + "mlp.down_proj.weight"],
        }
        for name, want in pairs.items():
            if not torch.equal(state[name], want):
                mismatched.append(name)
    mixtral = c["model_type"] == "mixtral"
    moe, (g, u, d) = (
        ("block_sparse_moe.", ("w1", "w3", "w2"))
        if mixtral
        else ("mlp.", ("gate_proj", "up_proj", "down_proj"))
    )
    for i in range(c["num_hidden_layers"] if experts else 0):
        p, q = f"decoder.layers.{i}.mlp.", f"model.layers.{i}.{moe}"
        pairs = {p + "router.weight": hf_state[q + "gate.weight"]}
        for e in range(experts):
            x, y = p + f"experts.local_experts.{e}.", q + f"experts.{e}."
            pairs[x + "linear_fc1.weight"] = torch.cat(
                [hf_state[y + f"{g}.weight"], hf_state[y + f"{u}.weight"]]
            )
            pairs[x + "linear_fc2.weight"] = hf_state[y + f"{d}.weight"]
        if not mixtral:
            pairs[p + "shared_experts.linear_fc1.weight"] = torch.cat(
                [
                    hf_state[q + "shared_expert.gate_proj.weight"],
                    hf_state[q + "shared_expert.up_proj.weight"],
                ]
            )
            pairs[p + "shared_experts.linear_fc2.weight"] = hf_state[
                q + "shared_expert.down_proj.weight"
            ]
            pairs[p + "shared_experts.gate_weight"] = hf_state[q + "shared_expert_gate.weight"]
        mismatched += [name for name, want in pairs.items() if not torch.equal(state[name], want)]
    vocab = c["vocab_size"]
    emb = state["embedding.word_embeddings.weight"]
    if not torch.equal(emb[:vocab], hf_state["model.embed_tokens.weight"]) or emb[vocab:].any():
        mismatched.append("embedding.word_embeddings.weight")
    if "lm_head.weight" in hf_state and not torch.equal(
        state["output_layer.weight"][:vocab], hf_state["lm_head.weight"]
    ):
        mismatched.append("output_layer.weight")
    return {
        "expected": expected,
        "found": found,
        "missing_keys": list(result.missing_keys),
        "unexpected_keys": list(result.unexpected_keys),
        "mismatched": mismatched,
        "params": len(state),
        # dense only: Megatron's router normalises top-k weights unlike Qwen2-MoE by default
        "logits_diff": _logits_diff(model, hf, vocab)
        if torch.cuda.is_available() and not experts
        else None,
    }


def _logits_diff(model: torch.nn.Module, hf: str, vocab: int) -> float:
    """Megatron's logits against transformers' on one input (needs CUDA: GPTModel.forward puts
    RoPE's table and the attention scores on the current CUDA device). Never run on the CPU-only
    machines this suite was written on."""
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(hf).eval()
    tokens = torch.tensor([[1, 5, 9, 77, 3]])
    with torch.no_grad():
        want = reference(tokens).logits
        model = model.cuda().eval()
        got = model(tokens.cuda(), torch.arange(5).cuda()[None], None)[..., :vocab].cpu()
    return float((got - want).abs().max())


def _moe_config(c: dict) -> dict:
    if c.get("num_local_experts"):  # Mixtral: no shared expert
        return dict(
            num_moe_experts=c["num_local_experts"],
            moe_ffn_hidden_size=c["intermediate_size"],
            moe_router_topk=c["num_experts_per_tok"],
        )
    if not c.get("num_experts"):
        return {}
    return dict(
        num_moe_experts=c["num_experts"],
        moe_ffn_hidden_size=c["moe_intermediate_size"],
        moe_router_topk=c["num_experts_per_tok"],
        moe_shared_expert_intermediate_size=c["shared_expert_intermediate_size"],
        moe_shared_expert_gate=True,
    )


def make_moe(path: str, kind: str) -> str:
    """A tiny Qwen2-MoE (router, 4 experts, a gated shared expert) or Mixtral, saved."""
    from transformers import AutoModelForCausalLM, MixtralConfig, Qwen2MoeConfig

    sizes = dict(SIZES, num_experts_per_tok=2, num_hidden_layers=2)
    if kind == "qwen2_moe":
        config = Qwen2MoeConfig(
            **sizes, num_experts=4, moe_intermediate_size=32, shared_expert_intermediate_size=64
        )
    else:
        config = MixtralConfig(**dict(sizes, intermediate_size=48), num_local_experts=4)
    torch.manual_seed(7)
    model = AutoModelForCausalLM.from_config(config).eval()
    return save(model, path)


def run_megatron_checks(cases: list) -> list:
    """`megatron_check` of each (hf, dst, padded_vocab) in one fresh interpreter; the results."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = MEGATRON_CHECK.format(tests=os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps([cases, port])],
        capture_output=True,
        text=True,
        timeout=180,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULT "))
