"""Hostile files (issue 20): truncated and corrupted safetensors, torch pickles that would run
code, broken run directories. One line, exit 2 (or a report that skips what it cannot read),
never a traceback, never code from a pickle. In process, no cluster."""

from __future__ import annotations

import os
import pickle
import struct
import zipfile

import pytest
from typer.testing import CliRunner

import rankscope.cli.main as cli
from helpers.errors import one_line_exit_2

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")


class _Evil:
    """Unpickling this runs `touch <marker>`: what a malicious checkpoint does."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _run(*args: str):
    return CliRunner().invoke(cli.app, list(args))


@pytest.fixture
def good(tmp_path):
    path = tmp_path / "good.safetensors"
    safetensors_torch.save_file({"w": torch.ones(8, 8), "b": torch.zeros(8)}, str(path))
    return path.read_bytes()


@pytest.mark.parametrize("cut", [0, 1, 7, 8, 12, 40, -1])
def test_truncated_safetensors(tmp_path, good, cut):
    path = tmp_path / "t.safetensors"
    path.write_bytes(good[: cut if cut >= 0 else len(good) - 1])
    one_line_exit_2(_run("ckpt", "inspect", str(path)), str(path))


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:8] + b"\xff" * 10 + b[18:],  # the header is not UTF-8
        lambda b: struct.pack("<Q", 1 << 62) + b[8:],  # a header length past any file
        lambda b: b[:8] + b"[" + b[9:],  # JSON, not an object
        lambda b: b[:8] + b[8:].replace(b'"F32"', b'"Q99"', 1),  # an unknown dtype
        lambda b: b[:8] + b[8:].replace(b"[8,8]", b"[9,9]", 1),  # offsets that do not add up
    ],
)
def test_corrupted_safetensors(tmp_path, good, damage):
    path = tmp_path / "c.safetensors"
    path.write_bytes(damage(good))
    result = _run("ckpt", "inspect", str(path))
    if result.exit_code == 0:  # a header that still reads: it must at least not crash
        return
    one_line_exit_2(result, str(path))


def test_ckpt_diff_of_a_truncated_file(tmp_path, good):
    ok, bad = tmp_path / "ok.safetensors", tmp_path / "bad.safetensors"
    ok.write_bytes(good)
    bad.write_bytes(good[:20])
    one_line_exit_2(_run("ckpt", "diff", str(ok), str(bad)), str(bad))


@pytest.mark.parametrize("layout", ["zip", "plain"])
def test_a_pickle_that_would_run_code_is_refused_and_runs_nothing(tmp_path, layout):
    marker = tmp_path / "PWNED"
    payload = pickle.dumps({"w": _Evil(str(marker))}, protocol=2)
    path = tmp_path / ("evil.bin" if layout == "zip" else "evil.pt")
    if layout == "zip":  # torch.save's own layout, its data.pkl replaced
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("archive/data.pkl", payload)
            z.writestr("archive/version", "3\n")
    else:
        path.write_bytes(payload)
    one_line_exit_2(_run("ckpt", "inspect", str(path)), str(path))
    one_line_exit_2(_run("ckpt", "diff", str(path), str(path)), str(path))
    assert not marker.exists(), "code from a pickle ran"


def test_a_truncated_torch_file(tmp_path):
    whole = tmp_path / "whole.bin"
    torch.save({"w": torch.ones(64)}, str(whole))
    data = whole.read_bytes()
    for cut in (10, len(data) // 2, len(data) - 5):
        path = tmp_path / f"t{cut}.bin"
        path.write_bytes(data[:cut])
        one_line_exit_2(_run("ckpt", "inspect", str(path)), str(path))


def _run_dir(tmp_path, files: dict[str, bytes]) -> str:
    job = tmp_path / "runs" / "01000000"
    job.mkdir(parents=True)
    for name, data in files.items():
        (job / name).write_bytes(data)
    return str(job)


@pytest.mark.parametrize(
    "files",
    [
        {"events.jsonl": b"\xff\xfe\x00garbage\n{\n[1,2]\nnull\n"},
        {"events.jsonl": b'{"kind": "hang.report", "payload": "not a dict"}\n'},
        {"events.jsonl": b'{"kind": 5, "time": null, "payload": {}}\n'},
        {"events.jsonl": b'{"kind": "x", "time": "zz", "payload": {}}\n'},
        {"hang-report-1.json": b'{"findings": ['},
        {"trace.json": b'{"traceEvents": [{"ph": "X", "ts": "soon"'},
        {"events.jsonl": b""},
    ],
    ids=["binary", "payload-type", "kind-type", "time-type", "cut-json", "cut-trace", "empty"],
)
def test_broken_run_directories(tmp_path, files):
    job_dir = _run_dir(tmp_path, files)
    out = tmp_path / "page.html"
    result = _run("report", job_dir, "-o", str(out))
    assert "Traceback" not in result.output
    if result.exit_code == 2:  # refused in one line, nothing written
        one_line_exit_2(result)
        assert not out.exists()
    else:  # or a page that leaves out what it cannot read
        assert result.exit_code in (0, 1), result.output
        assert out.exists()
