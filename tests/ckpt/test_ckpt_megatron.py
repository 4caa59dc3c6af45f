"""Megatron-core's own formats: torch_dist written on CPU and read back by megatron-core itself,
legacy mp_rank_NN_PPP/model_optim_rng.pt read safely, diff across the two worlds, SIGKILL."""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import pickle
import random
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch
from _ckpt_models import make_model, make_moe, run_megatron_checks, safetensors_state, save
from typer.testing import CliRunner

from rankscope.ckpt import ExplanationKind, SourceKind, convert, diff, inspect
from rankscope.cli.main import app
from rankscope.errors import CheckpointError


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    root = tmp_path_factory.mktemp("megatron")
    return {
        "llama": save(make_model("llama", seed=4), root / "llama"),
        "qwen2": save(make_model("qwen2", seed=5), root / "qwen2"),
        "qwen2_moe": make_moe(root / "qwen2_moe", "qwen2_moe"),
        "mixtral": make_moe(root / "mixtral", "mixtral"),
    }


def _digest(folder):
    h = hashlib.sha256()
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            h.update(name.encode() + f.read())
    return h.hexdigest()


def test_megatron_core_reads_and_loads_what_we_write(hf, tmp_path):
    import torch.distributed.checkpoint as dcp

    from rankscope.ckpt.megatron.dist_meta import read_dist_metadata
    from rankscope.ckpt.megatron.dist_reader import DistReader

    llama, qwen2, moe = (str(tmp_path / n) for n in ("llama", "qwen2", "moe"))
    a = convert("hf-to-mcore", hf["llama"], llama, tp=2, vocab_divisible_by=48, verify=True)
    b = convert("hf-to-mcore", hf["qwen2"], qwen2, tp=1, verify=True)
    c = convert("hf-to-mcore", hf["qwen2_moe"], moe, tp=2, vocab_divisible_by=64, verify=True)
    mixtral = str(tmp_path / "mixtral")
    d = convert("hf-to-mcore", hf["mixtral"], mixtral, tp=2, verify=True)
    assert (a.padded_vocab, b.padded_vocab) == (192, 128)  # 128 -> next multiple of 48 * 2
    assert sorted(os.listdir(llama)) == [
        ".metadata", "__0_0.distcp", "common.pt", "config.json", "metadata.json"
    ]  # fmt: skip
    results = run_megatron_checks(
        [
            [hf["llama"], llama, a.padded_vocab],
            [hf["qwen2"], qwen2, b.padded_vocab],
            [hf["qwen2_moe"], moe, c.padded_vocab],  # router, 4 experts, gated shared expert
            [hf["mixtral"], mixtral, d.padded_vocab],  # router, 4 experts
        ]
    )
    for result in results:
        # megatron-core's load_tensors_metadata lists exactly what GPTModel.sharded_state_dict()
        # expects, with the same global shapes (layers stacked on the leading axis)
        assert result["found"] == result["expected"]
        # dist_checkpointing.load(strict=raise_all) then load_state_dict(strict=True): all keys
        assert result["missing_keys"] == result["unexpected_keys"] == []
        # every loaded parameter equals the HF tensors it was made of, bit for bit
        assert result["mismatched"] == []
        # Megatron's forward needs CUDA (RoPE table, attention buffer): compared where it runs
        assert result["logits_diff"] is None or result["logits_diff"] < 1e-4
    assert "decoder.layers.self_attention.linear_qkv.bias" in results[1]["found"]
    assert results[2]["found"]["decoder.layers.mlp.experts.experts.linear_fc1.weight"] == [
        2, 4, 64, 64
    ]  # fmt: skip
    # torch's own DCP reader and rankscope's chunk reader agree on every tensor
    meta = read_dist_metadata(llama)
    ours = DistReader(meta)
    for key, info in meta.tensors.items():
        theirs = {key: torch.empty(info.shape, dtype=getattr(torch, info.dtype))}
        dcp.load(theirs, storage_reader=dcp.FileSystemReader(llama), no_dist=True)
        assert torch.equal(theirs[key], ours.full(key)), key
    emb = ours.full("embedding.word_embeddings.weight")
    assert torch.equal(emb[:128], safetensors_state(hf["llama"])["model.embed_tokens.weight"])
    assert not emb[128:].any()  # padding rows are zeros


def test_mcore_to_hf_from_torch_dist_gives_the_same_logits(hf, tmp_path):
    from transformers import AutoModelForCausalLM

    dist, back = str(tmp_path / "dist"), str(tmp_path / "back")
    convert("hf-to-mcore", hf["llama"], dist, tp=2, vocab_divisible_by=48)
    convert("mcore-to-hf", dist, back, verify=True)
    original, returned = safetensors_state(hf["llama"]), safetensors_state(back)
    assert original.keys() == returned.keys()
    for name, tensor in original.items():
        assert torch.equal(tensor, returned[name]), name  # padded rows dropped
    tokens = torch.tensor([[1, 5, 9, 77, 3]])
    a = AutoModelForCausalLM.from_pretrained(hf["llama"]).eval()
    b = AutoModelForCausalLM.from_pretrained(back).eval()
    with torch.no_grad():
        assert torch.equal(a(tokens).logits, b(tokens).logits)


def test_inspect_reads_metadata_alone(hf, tmp_path):
    out = str(tmp_path / "d")
    convert("hf-to-mcore", hf["qwen2"], out)
    with open(os.path.join(out, "__0_0.distcp"), "wb"):
        pass  # no tensor data left: inspect must not need any
    info = inspect(out)
    assert info.kind is SourceKind.MCORE_DIST
    assert info.scheme.label == "mcore-gpt" and info.scheme.layer_count == 2
    assert info.tensor_count == 17 and info.extra_state == 8
    assert any("2 layers stacked on the leading axis" in n for n in info.notes)
    assert any("8 _extra_state entries" in n for n in info.notes)
    with pytest.raises(CheckpointError, match=r"not a readable tensor record|truncated"):
        convert("mcore-to-hf", out, str(tmp_path / "back"))
    assert not os.path.exists(tmp_path / "back")


def test_diff_explains_the_mapping_and_finds_a_wrong_tp_shard(hf, tmp_path):
    out = str(tmp_path / "d")
    convert("hf-to-mcore", hf["qwen2"], out, tp=2, vocab_divisible_by=64)
    clean = diff(hf["qwen2"], out)
    assert [e.kind for e in clean.explanations] == [ExplanationKind.NAMING_SCHEME]
    assert "27 of 27" in clean.explanations[0].message
    assert clean.explanations[0].fix.startswith(f"rankscope ckpt convert mcore-to-hf {out} OUT")
    # inject: one rank saved its own shard of linear_proj as if it were the whole tensor
    path = os.path.join(out, ".metadata")
    with open(path, "rb") as f:
        meta = pickle.load(f)  # our own file, in a test: plain pickle is fine here
    key = "decoder.layers.self_attention.linear_proj.weight"
    entry = meta.state_dict_metadata[key]
    entry.size = torch.Size([2, 64, 32])
    entry.chunks = [c for c in entry.chunks if c.offsets[2] == 0]
    with open(path, "wb") as f:
        pickle.dump(meta, f)
    bad = diff(hf["qwen2"], out)
    kinds = [e.kind for e in bad.explanations]
    assert kinds == [ExplanationKind.NAMING_SCHEME, ExplanationKind.TENSOR_PARALLEL]
    tp = bad.explanations[1]
    assert "tensor parallel size 2" in tp.message and "dim 1" in tp.message
    assert tp.count == 2 and tp.examples == (
        "decoder.layers.0.self_attention.linear_proj.weight",
        "decoder.layers.1.self_attention.linear_proj.weight",
    )
    result = CliRunner().invoke(app, ["ckpt", "diff", hf["qwen2"], out])
    assert result.exit_code == 1 and "[tensor-parallel]" in result.output


def test_metadata_unpickler_runs_no_code(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    folder = tmp_path / "evil"
    folder.mkdir()
    (folder / "metadata.json").write_text('{"sharded_backend": "torch_dist"}')
    (folder / ".metadata").write_bytes(pickle.dumps(Evil()))
    with pytest.raises(CheckpointError, match=r"refused global (posix|os)\.system"):
        inspect(str(folder))
    result = CliRunner().invoke(app, ["ckpt", "inspect", str(folder)])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert not marker.exists()


def test_legacy_megatron_files_read_safely_with_stages_and_extra_state(hf, tmp_path):
    out = str(tmp_path / "legacy")
    convert("hf-to-mcore", hf["qwen2"], out, tp=2, pp=2, fmt="legacy")
    assert sorted(os.listdir(out)) == [
        "config.json", "mp_rank_00_000", "mp_rank_00_001", "mp_rank_01_000", "mp_rank_01_001"
    ]  # fmt: skip
    for rank in sorted(os.listdir(out)):
        if not rank.startswith("mp_rank"):
            continue
        path = os.path.join(out, rank, "model_optim_rng.pt")
        doc = torch.load(path, weights_only=True)
        # what Megatron-LM adds: its arguments, numpy/python/torch RNG states, TE extra state
        doc["args"] = argparse.Namespace(tensor_model_parallel_size=2, params_dtype=torch.float32)
        doc["rng_state"] = [
            {
                "random_rng_state": random.getstate(),
                "np_rng_state": np.random.get_state(),
                "torch_rng_state": torch.get_rng_state(),
            }
        ]
        doc["model"]["decoder.layers.0.self_attention.linear_qkv._extra_state"] = io.BytesIO(b"x")
        torch.save(doc, path)
    if argparse.Namespace not in torch.serialization.get_safe_globals():
        with pytest.raises(pickle.UnpicklingError):
            torch.load(path, weights_only=True)  # what `weights_only=True` alone does
    info = inspect(out)
    assert info.kind is SourceKind.MCORE_LEGACY and info.tensor_parallel.tp_size == 2
    assert info.scheme.layer_count == 2 and info.scheme.last_layer == 1  # stage 1's layer 0
    assert info.extra_state == 10 and any("argparse.Namespace" in n for n in info.notes)
    assert any("2 pipeline stage(s), stages start at layers 0,1" in n for n in info.notes)
    result = diff(hf["qwen2"], out)
    assert not [e for e in result.explanations if e.kind is ExplanationKind.EXTRA]
    back = str(tmp_path / "back")
    convert("mcore-to-hf", out, back, verify=True)
    original, returned = safetensors_state(hf["qwen2"]), safetensors_state(back)
    assert original.keys() == returned.keys()
    assert all(torch.equal(original[k], returned[k]) for k in original)


def test_legacy_refuses_other_globals(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (tmp_path / "ck" / "mp_rank_00").mkdir(parents=True)
    torch.save({"model": {}, "x": Evil()}, tmp_path / "ck" / "mp_rank_00" / "model_optim_rng.pt")
    with pytest.raises(CheckpointError, match="refused: it pickles a global outside"):
        inspect(str(tmp_path / "ck"))
    assert not marker.exists()


_KILLED_CHILD = """
import sys, time
from rankscope.ckpt import convert
def progress(done, total):
    print("WRITING", flush=True)
    time.sleep(120)
convert("hf-to-mcore", sys.argv[1], sys.argv[2], tp=2, progress=progress)
"""


def test_sigkill_mid_write_leaves_no_output_and_the_next_run_cleans_up(hf, tmp_path):
    src, dst = hf["llama"], str(tmp_path / "out")
    before = _digest(src)
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_CHILD, src, dst], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "WRITING"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    orphan = f"{dst}.rankscope-tmp-{child.pid}"
    assert child.returncode == -signal.SIGKILL
    assert not os.path.exists(dst)  # nothing half-written under the final name
    assert os.path.isdir(orphan) and os.listdir(orphan)  # the partial write, left by the kill
    assert _digest(src) == before  # the input is untouched
    convert("hf-to-mcore", src, dst, tp=2)
    assert not os.path.exists(orphan)  # the next run removed the dead run's folder
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_fewer_kv_heads_than_tp_ranks(hf, tmp_path):
    from rankscope.ckpt.megatron.dist_meta import read_dist_metadata
    from rankscope.ckpt.megatron.dist_reader import DistReader

    out, back = str(tmp_path / "d"), str(tmp_path / "back")
    convert("hf-to-mcore", hf["llama"], out, tp=4, verify=True)  # 2 KV heads, 4 ranks
    reader = DistReader(read_dist_metadata(out))
    key = "decoder.layers.self_attention.linear_qkv.weight"
    # each rank holds an even quarter of the global fused rows: half a key-value group
    assert [c.sizes for c in reader.meta.tensors[key].chunks[:4]] == [(1, 32, 64)] * 4
    hf_state = safetensors_state(hf["llama"])
    q, k, v = (hf_state[f"model.layers.0.self_attn.{n}_proj.weight"] for n in "qkv")
    group0 = torch.cat([q[:32], k[:16], v[:16]])  # query heads 0-1, key 0, value 0
    assert torch.equal(reader.layer(key, 0)[:64], group0)
    convert("mcore-to-hf", out, back, verify=True)
    assert all(torch.equal(t, safetensors_state(back)[n]) for n, t in hf_state.items())


@pytest.mark.parametrize("kind", ["qwen2_moe", "mixtral"])
def test_mixture_of_experts_round_trip_and_logits(hf, tmp_path, kind):
    from transformers import AutoModelForCausalLM

    dist, back = str(tmp_path / "dist"), str(tmp_path / "back")
    convert("hf-to-mcore", hf[kind], dist, tp=2, verify=True)
    info = inspect(dist)
    layer0 = [n for n in (t.name for t in info.tensors) if n.startswith("decoder.layers.0.mlp.")]
    assert "decoder.layers.0.mlp.router.weight" in layer0
    assert "decoder.layers.0.mlp.experts.local_experts.3.linear_fc2.weight" in layer0
    assert ("decoder.layers.0.mlp.shared_experts.gate_weight" in layer0) is (kind == "qwen2_moe")
    convert("mcore-to-hf", dist, back, verify=True)
    original, returned = safetensors_state(hf[kind]), safetensors_state(back)
    assert original.keys() == returned.keys()
    assert all(torch.equal(original[k], returned[k]) for k in original)
    tokens = torch.tensor([[1, 5, 9, 77, 3]])
    a = AutoModelForCausalLM.from_pretrained(hf[kind]).eval()
    b = AutoModelForCausalLM.from_pretrained(back).eval()
    with torch.no_grad():
        assert torch.equal(a(tokens).logits, b(tokens).logits)
