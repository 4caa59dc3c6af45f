"""`rankscope doctor --config`: the rule table and the memory estimate on small configs in the
shape of verl's ppo_trainer.yaml (written here), and the CLI's exit codes."""

from __future__ import annotations

import json
import pathlib

import pytest
from typer.testing import CliRunner

import rankscope.cli.main as cli
from rankscope.doctor.config_lint.cli import lint
from rankscope.doctor.config_lint.load import load_model_shape
from rankscope.doctor.config_lint.memory import estimate
from rankscope.doctor.config_lint.model import ClusterShape
from rankscope.doctor.config_lint.rules import RULES, largest_divisor_at_most

GIB = 1 << 30

QWEN25_7B = json.loads(
    (pathlib.Path(__file__).parents[1] / "data/qwen2.5-7b-config.json").read_text()
)
"""Qwen2.5-7B's shape: 28 heads (TP 8 does not divide them), 7,615,616,512 parameters."""

TRAINER = """\
data:
  train_batch_size: {train_batch_size}
  max_prompt_length: {prompt}
  max_response_length: {response}
  shuffle: true                     # a key rankscope does not read: ignored
actor_rollout_ref:
  hybrid_engine: true
  model:
    path: {model}
    enable_gradient_checkpointing: {ckpt}
    enable_activation_offload: false
  actor:
    strategy: fsdp
    ppo_mini_batch_size: {mini}
    ppo_micro_batch_size_per_gpu: {micro}
    use_dynamic_bsz: false
    ulysses_sequence_parallel_size: 1
    optim:
      lr: 1.0e-06
    fsdp_config:
      param_offload: false
      optimizer_offload: false
  rollout:
    name: vllm
    n: {n}
    tensor_model_parallel_size: {tp}
    gpu_memory_utilization: {util}
    log_prob_micro_batch_size_per_gpu: 8
  ref:
    log_prob_micro_batch_size_per_gpu: 8
trainer:
  nnodes: 1
  n_gpus_per_node: 8
  default_local_dir: checkpoints/${{trainer.experiment_name}}
  experiment_name: gsm8k
"""
GOOD = {
    "train_batch_size": 256,
    "prompt": 512,
    "response": 512,
    "ckpt": "true",
    "mini": 64,
    "micro": 4,
    "n": 1,
    "tp": 4,
    "util": 0.4,
}


@pytest.fixture
def model_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    folder = tmp_path / "qwen2.5-7b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN25_7B))
    return folder


def _config(tmp_path: pathlib.Path, model_dir: pathlib.Path, **changes: object) -> str:
    path = tmp_path / "trainer.yaml"
    path.write_text(TRAINER.format(**{**GOOD, "model": model_dir, **changes}))
    return str(path)


def _rows(report) -> dict[str, object]:
    return {r.rule: r for r in report.rules}


def test_every_rule_has_a_row_and_a_good_config_passes_them_all(tmp_path, model_dir):
    report = lint(_config(tmp_path, model_dir), [], gpu_memory_gib=80)
    assert [r.rule for r in report.rules] == [name for name, _ in RULES]
    assert {r.status.value for r in report.rules} <= {"ok", "skip"}, report.rules
    result = CliRunner().invoke(
        cli.app, ["doctor", "--config", _config(tmp_path, model_dir), "--gpu-memory", "80"]
    )
    assert result.exit_code == 0, result.output
    assert "memory per GPU" in result.output


def test_model_shape_counts_qwen25_7b_parameters(model_dir):
    shape = load_model_shape(str(model_dir), explicit=True)
    assert shape is not None and shape.params == 7_615_616_512  # the published count


def test_mini_batch_that_does_not_split_the_train_batch(tmp_path, model_dir):
    row = _rows(lint(_config(tmp_path, model_dir, mini=96), []))["train batch / mini batch"]
    assert row.status.value == "fail"
    assert row.keys == {
        "data.train_batch_size": 256,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 96,
    }
    assert "256 % 96 = 64" in row.message
    assert row.fix == {"actor_rollout_ref.actor.ppo_mini_batch_size": 64}


def test_micro_batch_above_the_per_gpu_share_gives_the_corrected_value(tmp_path, model_dir):
    """verl#405: mini 8 x n 1 over 8 GPUs is 1 sample per GPU; micro 4 -> 0 accumulation steps."""
    report = lint(_config(tmp_path, model_dir, mini=8, micro=4), [])
    row = _rows(report)["actor micro batch"]
    assert row.status.value == "fail"
    assert "per-GPU share 8 x 1 / (8 / 1) = 1 < micro batch 4" in row.message
    assert "0 steps" in row.message
    assert row.fix == {"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 1}
    assert row.keys["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == 4


def test_override_fixes_the_micro_batch(tmp_path, model_dir):
    fixed = lint(
        _config(tmp_path, model_dir, mini=8, micro=4),
        ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1"],
    )
    assert _rows(fixed)["actor micro batch"].status.value == "ok"


def test_micro_batch_that_does_not_divide_the_share(tmp_path, model_dir):
    row = _rows(lint(_config(tmp_path, model_dir, mini=48, micro=4), []))["actor micro batch"]
    assert row.status.value == "fail" and "6 % 4 = 2" in row.message
    assert row.fix == {"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 3}


def test_tp_8_with_28_heads(tmp_path, model_dir):
    row = _rows(lint(_config(tmp_path, model_dir, tp=8), []))["rollout TP / attention heads"]
    assert row.status.value == "fail"
    assert "num_attention_heads 28 % 8 = 4" in row.message
    assert row.fix == {"actor_rollout_ref.rollout.tensor_model_parallel_size": 4}


def test_tp_above_the_gpus_of_a_node(tmp_path, model_dir):
    row = _rows(lint(_config(tmp_path, model_dir), ["trainer.n_gpus_per_node=2"]))[
        "rollout TP / GPUs"
    ]
    assert row.status.value == "fail" and "TP 4 must be <= GPUs per node 2" in row.message
    assert row.fix == {"actor_rollout_ref.rollout.tensor_model_parallel_size": 2}


def test_more_gpus_than_the_cluster_has(tmp_path, model_dir):
    cluster = ClusterShape(gpus_per_node=(4, 4))
    row = _rows(lint(_config(tmp_path, model_dir), [], cluster=cluster))["GPUs in the cluster"]
    assert row.status.value == "fail"
    assert "1 x 8 = 8 GPUs wanted; the cluster has 8 (4, 4 per node)" in row.message
    assert row.fix == {"trainer.nnodes": 1, "trainer.n_gpus_per_node": 4}


def test_bf16_on_a_v100(tmp_path, model_dir):
    cluster = ClusterShape(gpus_per_node=(8,), gpu_names=("Tesla V100-SXM2-32GB",) * 8)
    row = _rows(lint(_config(tmp_path, model_dir), [], cluster=cluster))["bf16 on the GPUs"]
    assert row.status.value == "fail" and "V100" in row.message
    assert row.fix["actor_rollout_ref.rollout.dtype"] == "float16"


def test_memory_above_85_percent_names_the_micro_batch_first(tmp_path, model_dir):
    config = _config(tmp_path, model_dir, prompt=2048, response=2048, micro=16, mini=128)
    report = lint(config, [], gpu_memory_gib=80)
    row = _rows(report)["memory per GPU"]
    assert row.status.value == "fail"
    assert report.memory is not None and report.memory.fraction > 0.85
    first = report.memory.knobs[0]
    assert first.name == "micro batch"
    assert first.change == "actor.ppo_micro_batch_size_per_gpu 16 -> 8"
    assert first.peak_after_bytes < 0.85 * 80 * GIB
    assert "1. micro batch: actor.ppo_micro_batch_size_per_gpu 16 -> 8 ->" in row.message
    result = CliRunner().invoke(cli.app, ["doctor", "--config", config, "--gpu-memory", "80"])
    assert result.exit_code == 1


def test_hand_computed_case_gradient_checkpointing_on_one_node(tmp_path, model_dir):
    """Qwen2.5-7B, 8 GPUs, micro 4 x 1024 tokens, gradient checkpointing, vLLM at 0.5 of 80 GiB."""
    p = 7_615_616_512
    layer = (
        233_057_792  # q 3584^2 + k,v 2x3584x512 + o 3584^2 + bias 4608 + MLP 3x3584x18944 + 7168
    )
    params = grads = 4 * p / 8  # fp32, sharded over 8
    optimizer = 8 * p / 8
    gathered = 2 * 2 * layer
    tokens = 4 * 1024
    per_token_layer = 2 * (4 * 3584 + 3584 + 2 * 512 + 3584 + 4 * 18944)  # 196,608 bytes
    activations = 28 * 2 * 3584 * tokens + per_token_layer * tokens
    logits = 6 * tokens * 152064
    train = params + grads + optimizer + gathered + activations + logits  # 21.53e9
    rollout = params + optimizer + 0.5 * 80 * GIB  # 54.37e9
    e = estimate(_plan(tmp_path, model_dir, util=0.5), _shape(model_dir), 80 * GIB)
    assert e.train_peak == pytest.approx(train, rel=0.01)
    assert e.rollout_peak == pytest.approx(rollout, rel=0.01)
    assert e.peak == pytest.approx(54.37e9, rel=0.01)


def test_hand_computed_case_no_checkpointing_offloaded_two_nodes(tmp_path, model_dir):
    """16 GPUs, params and optimizer offloaded, micro 1 x 4096 tokens, no checkpointing, TP 4,
    device memory unknown: vLLM's share is weights + the KV cache the batch needs."""
    p = 7_615_616_512
    layer = 233_057_792
    tokens = 4096
    activations = 28 * 196_608 * tokens  # every layer keeps its tensors
    logits = 6 * tokens * 152064
    train = 2 * 2 * layer + activations + logits  # 28.22e9
    weights = 2 * p / 4
    kv_per_token = 2 * 28 * 1 * 128 * 2  # 4 KV heads over TP 4: one per GPU, head_dim 128
    sequences = 512 * 2 / (16 / 4)  # train batch x n over 4 rollout replicas
    rollout = weights + sequences * 4096 * kv_per_token
    plan = _plan(
        tmp_path,
        model_dir,
        ckpt="false",
        micro=1,
        mini=128,
        train_batch_size=512,
        n=2,
        prompt=1024,
        response=3072,
        overrides=[
            "trainer.nnodes=2",
            "actor_rollout_ref.actor.fsdp_config.param_offload=true",
            "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
        ],
    )
    e = estimate(plan, _shape(model_dir), None)
    assert e.params == e.grads == e.optimizer == 0
    assert e.train_peak == pytest.approx(train, rel=0.01)
    assert e.rollout_peak == pytest.approx(rollout, rel=0.01)


def _plan(tmp_path, model_dir, overrides=(), **changes):
    return lint(_config(tmp_path, model_dir, **changes), list(overrides)).plan


def _shape(model_dir):
    shape = load_model_shape(str(model_dir), explicit=True)
    assert shape is not None
    return shape


def test_a_relative_checkpoint_dir_on_several_nodes(tmp_path, model_dir):
    row = _rows(lint(_config(tmp_path, model_dir), ["trainer.nnodes=2"]))["checkpoint dir"]
    assert row.status.value == "warn" and "checkpoints/gsm8k is relative" in row.message
    assert row.fix == {"trainer.default_local_dir": "/shared/checkpoints/gsm8k"}


def test_largest_divisor():
    assert [largest_divisor_at_most(28, d) for d in (8, 7, 3, 1)] == [7, 7, 2, 1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["no.such.key=3"], "override no.such.key: not in the config"),
        (["data.train_batch_size"], "write key=value"),
        (["data.train_batch_size=abc"], "data.train_batch_size: 'abc' is not a number"),
    ],
)
def test_bad_overrides_are_one_line_and_exit_2(tmp_path, model_dir, args, message):
    result = CliRunner().invoke(
        cli.app, ["doctor", "--config", _config(tmp_path, model_dir), *args]
    )
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1


def test_unreadable_yaml_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("data:\n  train_batch_size: [1, 2\n")
    binary = tmp_path / "model.bin"  # a checkpoint given for the config (found by the fuzz test)
    binary.write_bytes(b"\x80\x02}q\x00.")
    for path in (str(bad), str(tmp_path / "missing.yaml"), str(binary)):
        result = CliRunner().invoke(cli.app, ["doctor", "--config", path])
        assert result.exit_code == 2, result.output
        assert len(result.output.strip().splitlines()) == 1


def test_a_defaults_list_is_composed_by_hydra(tmp_path, model_dir):
    (tmp_path / "actor").mkdir()
    (tmp_path / "actor" / "small.yaml").write_text(
        "ppo_mini_batch_size: 8\nppo_micro_batch_size_per_gpu: 4\n"
    )
    main = tmp_path / "main.yaml"
    main.write_text(
        "defaults:\n  - actor@actor_rollout_ref.actor: small\n  - _self_\n"
        "data:\n  train_batch_size: 256\n"
        f"actor_rollout_ref:\n  model:\n    path: {model_dir}\n"
        "  rollout:\n    n: 1\n    tensor_model_parallel_size: 4\n"
        "trainer:\n  nnodes: 1\n  n_gpus_per_node: 8\n"
    )
    report = lint(str(main), ["actor_rollout_ref.rollout.n=1"])
    assert report.plan.ppo_mini_batch_size == 8
    assert _rows(report)["actor micro batch"].status.value == "fail"


def test_json_and_html(tmp_path, model_dir):
    html = tmp_path / "lint.html"
    result = CliRunner().invoke(
        cli.app,
        ["doctor", "--config", _config(tmp_path, model_dir, tp=8), "--json", "--html", str(html)],
    )
    assert result.exit_code == 1
    rows = json.loads(result.stdout)["data"]["rules"]
    assert any(r["rule"] == "rollout TP / attention heads" and r["status"] == "fail" for r in rows)
    assert "rollout TP / attention heads" in html.read_text()
