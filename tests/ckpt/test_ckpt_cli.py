"""`rankscope ckpt ...` as a user runs it: output, --json, exit codes, one-line errors."""

from __future__ import annotations

import json
import os

import pytest
from _ckpt_models import make_model, save
from typer.testing import CliRunner

from rankscope.cli.main import app

runner = CliRunner()


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return save(make_model("qwen2"), tmp_path_factory.mktemp("cli") / "qwen2")


def run(*args):
    return runner.invoke(app, ["ckpt", *args])


def flat(text):
    """Output with rich's line wrapping undone."""
    return " ".join(text.split())


def test_cli_surface_is_frozen():
    import typer.main

    group = typer.main.get_command(app).commands["ckpt"]
    surface = {
        name: sorted(o for p in cmd.params for o in getattr(p, "opts", []) if o.startswith("-"))
        for name, cmd in group.commands.items()
    }
    assert surface == {
        "inspect": ["--json"],
        "diff": ["--json"],
        "convert": [
            "--config",
            "--force",
            "--format",
            "--input",
            "--json",
            "--model-type",
            "--output",
            "--pp",
            "--tp",
            "--verify",
            "--vocab-divisible-by",
        ],
    }


def test_inspect_text_and_json(ckpt):
    result = run("inspect", ckpt)
    assert result.exit_code == 0, result.output
    assert "naming scheme: hf-qwen2" in result.output
    assert "layers: 2 (0-1)" in result.output
    assert "model.layers.N.self_attn.q_proj.bias" in result.output
    data = json.loads(run("inspect", ckpt, "--json").stdout)
    assert data["schema_version"] == 1 and data["command"] == "ckpt.inspect"
    assert data["data"]["scheme"]["scheme"] == "hf-qwen2"
    assert data["data"]["tensor_count"] == 27


def test_diff_exit_codes(ckpt, tmp_path):
    clean = run("diff", os.path.join(ckpt, "config.json"), ckpt)
    assert clean.exit_code == 0 and "MATCH" in clean.output
    mcore = str(tmp_path / "mcore")
    done = run("convert", "hf-to-mcore", ckpt, mcore, "--tp", "2", "--verify")
    assert done.exit_code == 0, done.output
    assert "format torch_dist, tensor parallel 2" in flat(done.output)
    assert "round trip verified bit-exact" in flat(done.output)
    bad = run("diff", os.path.join(ckpt, "config.json"), mcore)
    assert bad.exit_code == 1
    assert "[naming-scheme]" in bad.output
    assert f"fix: rankscope ckpt convert mcore-to-hf {mcore} OUT" in flat(bad.output)
    data = json.loads(run("diff", ckpt, mcore, "--json").stdout)
    assert data["data"]["matches"] is False
    assert data["data"]["explanations"][0]["kind"] == "naming-scheme"


@pytest.mark.parametrize(
    ("content", "words"),
    [(b"\x05\x00", "truncated"), (b"\x04\x00\x00\x00\x00\x00\x00\x00nope", "not JSON")],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, content, words):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    result = run("inspect", str(path))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and str(path) in lines[0]


def test_convert_bad_model_type_writes_nothing(ckpt, tmp_path):
    result = run(
        "convert",
        "hf-to-mcore",
        "--input",
        ckpt,
        "--output",
        str(tmp_path / "o"),
        "--model-type",
        "mistral",
    )
    assert result.exit_code == 2
    assert "rankscope converts llama, qwen2" in result.stderr
    assert os.listdir(tmp_path) == []


def test_convert_legacy_with_stages_and_bad_format(ckpt, tmp_path):
    out = str(tmp_path / "legacy")
    done = run("convert", "hf-to-mcore", ckpt, out, "--tp", "2", "--pp", "2", "--format", "legacy")
    assert done.exit_code == 0, done.output
    assert "format legacy, tensor parallel 2, pipeline 2" in flat(done.output)
    info = run("inspect", out)
    assert info.exit_code == 0 and "2 pipeline stage(s)" in flat(info.output)
    assert "10 _extra_state entries" in flat(info.output)  # 4 linears + core attention, x2
    bad = run("convert", "hf-to-mcore", ckpt, str(tmp_path / "x"), "--format", "nemo")
    assert bad.exit_code == 2 and "--format 'nemo': use one of torch_dist" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    missing = run("convert", "hf-to-mcore", ckpt)
    assert missing.exit_code == 2 and "needs SRC and DST" in missing.stderr
    assert sorted(os.listdir(tmp_path)) == ["legacy"]
