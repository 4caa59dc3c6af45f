"""HF -> Megatron-core -> HF conversion on real transformers checkpoints."""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from _ckpt_models import make_model, safetensors_state, save
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from rankscope.ckpt import convert, inspect
from rankscope.ckpt.expected import dims_from_config, read_config
from rankscope.ckpt.tensors import fuse, split_fused
from rankscope.errors import CheckpointError


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("conv")
    return {
        "llama": save(make_model("llama", seed=1), root / "llama", shard="40KB"),
        "qwen2": save(make_model("qwen2", seed=2), root / "qwen2"),
        "tied": save(make_model("llama", tied=True, seed=3), root / "tied"),
    }


@pytest.mark.parametrize(("kind", "tp"), [("llama", 1), ("qwen2", 2), ("tied", 2)])
def test_round_trip_is_bit_exact_and_logits_equal(models, tmp_path, kind, tp):
    from transformers import AutoModelForCausalLM

    model_type = "qwen2" if kind == "qwen2" else "llama"
    mcore, back = str(tmp_path / "mcore"), str(tmp_path / "back")
    there = convert(
        "hf-to-mcore",
        models[kind],
        mcore,
        model_type=model_type,
        tp=tp,
        fmt="rankscope",
        verify=True,
    )
    assert there.tp_size == tp and len(there.files) == tp
    assert sorted(os.listdir(mcore)) == ["config.json"] + [f"mp_rank_{r:02d}" for r in range(tp)]
    convert("mcore-to-hf", mcore, back, model_type=model_type, verify=True)
    original, returned = safetensors_state(models[kind]), safetensors_state(back)
    assert original.keys() == returned.keys()
    for name, tensor in original.items():
        assert torch.equal(tensor.view(torch.uint8), returned[name].view(torch.uint8)), name
    tokens = torch.tensor([[1, 5, 9, 77, 3]])
    a = AutoModelForCausalLM.from_pretrained(models[kind]).eval()
    b = AutoModelForCausalLM.from_pretrained(back).eval()
    with torch.no_grad():
        assert torch.equal(a(tokens).logits, b(tokens).logits)


def test_megatron_layout_and_tp_split(models, tmp_path):
    out = str(tmp_path / "mcore")
    convert("hf-to-mcore", models["qwen2"], out, model_type="qwen2", tp=2, fmt="rankscope")
    hf = safetensors_state(models["qwen2"])
    dims = dims_from_config(read_config(os.path.join(models["qwen2"], "config.json")), path="c")
    ranks = [load_file(os.path.join(out, f"mp_rank_{r:02d}", "model.safetensors")) for r in (0, 1)]
    p = "decoder.layers.0."
    assert ranks[0][p + "self_attention.linear_qkv.weight"].shape == (64, 64)  # (4+2*2)*16 / 2
    assert ranks[0][p + "self_attention.linear_qkv.bias"].shape == (64,)
    assert ranks[0][p + "self_attention.linear_proj.weight"].shape == (64, 32)
    assert ranks[0][p + "mlp.linear_fc1.weight"].shape == (128, 64)
    assert ranks[0]["embedding.word_embeddings.weight"].shape == (64, 64)
    assert torch.equal(
        ranks[1][p + "self_attention.linear_qkv.layer_norm_weight"],
        hf["model.layers.0.input_layernorm.weight"],
    )
    # rank 1 holds the second key-value group: query heads 2-3, then k and v of head 1
    q, k, v = (hf[f"model.layers.0.self_attn.{n}_proj.weight"] for n in "qkv")
    want = torch.cat([q[32:64], k[16:32], v[16:32]])
    assert torch.equal(ranks[1][p + "self_attention.linear_qkv.weight"], want)
    # rank 1's fc1 is [gate rows 64-127; up rows 64-127]
    gate, up = hf["model.layers.0.mlp.gate_proj.weight"], hf["model.layers.0.mlp.up_proj.weight"]
    assert torch.equal(ranks[1][p + "mlp.linear_fc1.weight"], torch.cat([gate[64:], up[64:]]))
    assert torch.equal(split_fused(fuse([q, k, v], _qkv(), dims), _qkv(), dims)[2], v)
    with safe_open(os.path.join(out, "mp_rank_01", "model.safetensors"), "pt") as f:
        assert f.metadata()["rankscope.tp_rank"] == "1"
    assert inspect(out).tensor_parallel.tp_size == 2


def _qkv():
    from rankscope.ckpt.mapping import Fuse

    return Fuse.QKV


def test_refuses_to_overwrite_and_writes_nothing_on_error(models, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep").write_text("x")
    with pytest.raises(CheckpointError, match="exists; pass --force"):
        convert("hf-to-mcore", models["llama"], str(out), model_type="llama")
    assert os.listdir(out) == ["keep"]
    with pytest.raises(CheckpointError, match="model_type is 'llama', not --model-type qwen2"):
        convert("hf-to-mcore", models["llama"], str(tmp_path / "x"), model_type="qwen2")
    with pytest.raises(CheckpointError, match="rankscope converts llama, qwen2"):
        convert("hf-to-mcore", models["llama"], str(tmp_path / "x"), model_type="gpt2")
    with pytest.raises(
        CheckpointError, match=r"num_key_value_heads \(2\) must divide by --tp \(4\)"
    ):
        convert(
            "hf-to-mcore", models["llama"], str(tmp_path / "x"), model_type="llama", tp=4,
            fmt="rankscope",
        )  # fmt: skip
    extra = tmp_path / "extra"
    shutil.copytree(models["qwen2"], extra)
    save_file({"model.layers.0.mlp.extra_proj.weight": torch.zeros(2)}, extra / "more.safetensors")
    with pytest.raises(CheckpointError, match=r"extra_proj\.weight has no counterpart"):
        convert("hf-to-mcore", str(extra), str(tmp_path / "x"), model_type="qwen2")
    shutil.rmtree(extra)
    assert sorted(os.listdir(tmp_path)) == ["out"]
    convert("hf-to-mcore", models["llama"], str(out), model_type="llama", force=True)
    assert sorted(os.listdir(out)) == [
        ".metadata", "__0_0.distcp", "common.pt", "config.json", "metadata.json"
    ]  # fmt: skip
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_input_is_never_touched(models, tmp_path):
    before = {
        f: os.stat(os.path.join(models["qwen2"], f)).st_mtime_ns
        for f in os.listdir(models["qwen2"])
    }
    convert("hf-to-mcore", models["qwen2"], str(tmp_path / "m"), model_type="qwen2", tp=2)
    after = {
        f: os.stat(os.path.join(models["qwen2"], f)).st_mtime_ns
        for f in os.listdir(models["qwen2"])
    }
    assert before == after
    with pytest.raises(CheckpointError, match="must not overlap"):
        convert(
            "hf-to-mcore", models["qwen2"], os.path.join(models["qwen2"], "sub"), model_type="qwen2"
        )
