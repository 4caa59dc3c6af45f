"""inspect and diff on real transformers checkpoints and their broken variants."""

from __future__ import annotations

import json
import os

import pytest
import torch
from _ckpt_models import make_model, save
from safetensors.torch import load_file, save_file

from rankscope.ckpt import ExplanationKind, Scheme, diff, inspect
from rankscope.ckpt.convert import convert
from rankscope.ckpt.expected import manifest_from_config
from rankscope.errors import CheckpointError


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpts")
    out = {}
    for kind in ("llama", "qwen2"):
        model = make_model(kind)
        out[kind] = save(model, root / kind)
        out[kind + "-sharded"] = save(model, root / f"{kind}-sharded", shard="40KB")
    out["llama-tied"] = save(make_model("llama", tied=True), root / "llama-tied")
    out["llama-4"] = save(make_model("llama", layers=4), root / "llama-4")
    out["root"] = str(root)
    return out


def _variant(ckpts, name, rename):
    """A single-file copy of the llama checkpoint with keys/tensors rewritten by `rename`."""
    state = load_file(os.path.join(ckpts["llama"], "model.safetensors"))
    path = os.path.join(ckpts["root"], name + ".safetensors")
    save_file(rename(state), path)
    return path


def _kinds(result):
    return [e.kind for e in result.explanations]


@pytest.mark.parametrize("kind", ["llama", "qwen2", "llama-sharded", "qwen2-sharded"])
def test_inspect_detects_family_layers_and_totals(ckpts, kind):
    result = inspect(ckpts[kind])
    want = Scheme.HF_QWEN2 if kind.startswith("qwen2") else Scheme.HF_LLAMA
    assert result.scheme.scheme is want
    assert result.scheme.layer_count == 2
    assert result.scheme.tied_embeddings is False
    model = make_model(kind.split("-")[0])
    assert result.total_params == sum(p.numel() for p in model.parameters())
    assert result.dtype_params == {"F32": result.total_params}
    assert result.tensor_parallel is None
    assert (result.files > 1) == kind.endswith("sharded")


def test_inspect_tied_and_four_layers(ckpts):
    assert inspect(ckpts["llama-tied"]).scheme.tied_embeddings is True
    assert inspect(ckpts["llama-4"]).scheme.layer_count == 4


@pytest.mark.parametrize("kind", ["llama", "qwen2-sharded", "llama-tied"])
def test_diff_against_own_config_is_clean(ckpts, kind):
    result = diff(os.path.join(ckpts[kind], "config.json"), ckpts[kind])
    assert result.matches, result.explanations
    assert result.explanations == []


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_own_tables_equal_transformers(ckpts, kind):
    config = os.path.join(ckpts[kind], "config.json")
    ours = manifest_from_config(config, use_transformers=False).tensors
    theirs = manifest_from_config(config, use_transformers=True).tensors
    assert {n: t.shape for n, t in ours.items()} == {n: t.shape for n, t in theirs.items()}


def test_live_module_against_checkpoint(ckpts):
    assert diff(make_model("llama"), ckpts["llama"]).matches


def test_ddp_prefix_is_explained(ckpts):
    path = _variant(ckpts, "ddp", lambda s: {"module." + k: v for k, v in s.items()})
    result = diff(os.path.join(ckpts["llama"], "config.json"), path)
    assert not result.matches
    assert _kinds(result) == [ExplanationKind.PREFIX]
    assert "module." in result.explanations[0].message and "DDP" in result.explanations[0].message


def test_base_model_prefix_is_explained(ckpts):
    def base(s):
        return {k.removeprefix("model."): v for k, v in s.items() if k != "lm_head.weight"}

    result = diff(ckpts["llama"], _variant(ckpts, "base", base))
    assert _kinds(result)[0] is ExplanationKind.PREFIX
    assert "`model.`" in result.explanations[0].message


def test_dropped_and_renamed_are_explained(ckpts):
    def damage(s):
        s = dict(s)
        del s["model.layers.1.mlp.down_proj.weight"]
        s["model.final_norm.weight"] = s.pop("model.norm.weight")
        return s

    result = diff(ckpts["llama"], _variant(ckpts, "damaged", damage))
    by_kind = {e.kind: e for e in result.explanations}
    assert set(by_kind) == {ExplanationKind.RENAMED, ExplanationKind.DROPPED}
    assert (
        "model.final_norm.weight -> model.norm.weight" in by_kind[ExplanationKind.RENAMED].message
    )
    assert by_kind[ExplanationKind.DROPPED].examples == ("model.layers.1.mlp.down_proj.weight",)


def test_tp_shard_is_explained(ckpts):
    def shard(s):
        out = {}
        for k, v in s.items():
            if k.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight")):
                v = v.chunk(2, dim=0)[0].clone()
            elif k.endswith(("o_proj.weight", "down_proj.weight")):
                v = v.chunk(2, dim=1)[0].clone()
            out[k] = v
        return out

    path = _variant(ckpts, "tp2", shard)
    result = diff(os.path.join(ckpts["llama"], "config.json"), path)
    assert _kinds(result) == [ExplanationKind.TENSOR_PARALLEL]
    assert "tensor parallel size 2" in result.explanations[0].message
    assert "dim 0 and dim 1" in result.explanations[0].message
    assert inspect(path).tensor_parallel.tp_size == 2


def test_megatron_names_are_explained_with_the_convert_command(ckpts, tmp_path):
    mcore = str(tmp_path / "mcore")
    convert("hf-to-mcore", ckpts["qwen2"], mcore, model_type="qwen2")
    info = inspect(mcore)
    assert info.scheme.scheme is Scheme.MCORE_GPT and info.scheme.layer_count == 2
    result = diff(os.path.join(ckpts["qwen2"], "config.json"), mcore)
    assert _kinds(result) == [ExplanationKind.NAMING_SCHEME]
    ex = result.explanations[0]
    assert "Megatron-core" in ex.message and "27 of 27" in ex.message
    assert ex.fix.startswith(f"rankscope ckpt convert mcore-to-hf {mcore} OUT")
    assert ex.fix.endswith("--model-type qwen2")


def test_layer_count_and_tied_embeddings_are_explained(ckpts):
    result = diff(os.path.join(ckpts["llama-4"], "config.json"), ckpts["llama"])
    assert _kinds(result) == [ExplanationKind.LAYER_COUNT]
    assert "ACTUAL has 2 layers (0-1), EXPECTED 4 (0-3)" in result.explanations[0].message
    result = diff(os.path.join(ckpts["llama-tied"], "config.json"), ckpts["llama"])
    assert _kinds(result) == [ExplanationKind.TIED_EMBEDDINGS]
    assert "untied lm_head.weight" in result.explanations[0].message


def test_fused_qkv_is_explained(ckpts):
    def fuse(s):
        out = {}
        for k, v in s.items():
            if ".q_proj." in k:
                parts = [s[k.replace("q_proj", p)] for p in ("q_proj", "k_proj", "v_proj")]
                out[k.replace("q_proj", "qkv_proj")] = torch.cat(parts)
            elif ".k_proj." not in k and ".v_proj." not in k:
                out[k] = v
        return out

    result = diff(ckpts["llama"], _variant(ckpts, "fused", fuse))
    assert _kinds(result) == [ExplanationKind.FUSED_SPLIT]
    assert "fuses q_proj/k_proj/v_proj into qkv_proj (2 tensors)" in result.explanations[0].message


def test_dtype_mismatch(ckpts):
    path = _variant(ckpts, "bf16", lambda s: {k: v.to(torch.bfloat16) for k, v in s.items()})
    result = diff(ckpts["llama"], path)
    assert len(result.dtype_mismatches) == 21
    assert _kinds(result) == [ExplanationKind.DTYPE]


def test_torch_bin_is_read_with_weights_only(ckpts, tmp_path):
    state = load_file(os.path.join(ckpts["llama"], "model.safetensors"))
    torch.save(state, tmp_path / "pytorch_model.bin")
    assert diff(ckpts["llama"], str(tmp_path / "pytorch_model.bin")).matches
    torch.save({"state": state, "obj": object.__new__(json.JSONDecoder)}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match="weights_only=True"):
        inspect(tmp_path / "evil.pt")


def test_missing_index_shard_is_one_clear_error(ckpts, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(ckpts["llama-sharded"], copy)
    index = json.loads((copy / "model.safetensors.index.json").read_text())
    victim = sorted(set(index["weight_map"].values()))[1]
    (copy / victim).unlink()
    with pytest.raises(CheckpointError, match=f"shard {victim} .* is missing"):
        inspect(copy)
