"""The safetensors header reader: real files, and random or corrupted headers (hypothesis)."""

from __future__ import annotations

import contextlib
import json
import struct

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from rankscope.ckpt.header import parse_header, read_header
from rankscope.errors import CheckpointError


@pytest.fixture()
def real(tmp_path):
    tensors = {
        "a": torch.zeros(3, 4, dtype=torch.bfloat16),
        "b": torch.arange(5, dtype=torch.int64),
        "c": torch.ones(()),
        "empty": torch.zeros(0, 7),
    }
    path = tmp_path / "m.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt", "step": "7"})
    return path


def test_reads_names_shapes_dtypes_and_metadata(real):
    header = read_header(real)
    assert {n: (t.shape, t.dtype) for n, t in header.tensors.items()} == {
        "a": ((3, 4), "BF16"),
        "b": ((5,), "I64"),
        "c": ((), "F32"),
        "empty": ((0, 7), "F32"),
    }
    assert header.metadata == {"format": "pt", "step": "7"}
    assert header.tensors["a"].nbytes == 24


def _file(tmp_path, header: bytes, data: bytes = b"", length: int | None = None):
    path = tmp_path / "bad.safetensors"
    n = len(header) if length is None else length
    path.write_bytes(struct.pack("<Q", n) + header + data)
    return path


@pytest.mark.parametrize(
    ("header", "data", "length", "words"),
    [
        (b"", b"", None, "not JSON"),
        (b"{not json", b"", None, "not JSON"),
        (b"[1, 2]", b"", None, "not an object"),
        (
            b'{"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}',
            b"1234",
            None,
            "outside",
        ),
        (b'{"x": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 4]}}', b"1234", None, "dtype"),
        (b'{"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}', b"1234", None, "needs"),
        (b"{}", b"", 10**6, "truncated"),
        (b"{}", b"", 2**63, "limit"),
    ],
)
def test_bad_headers_say_what_is_wrong(tmp_path, header, data, length, words):
    path = _file(tmp_path, header, data, length)
    with pytest.raises(CheckpointError, match=words) as info:
        read_header(path)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_truncated_prefix_and_missing_file(tmp_path):
    short = tmp_path / "short.safetensors"
    short.write_bytes(b"\x01\x02")
    with pytest.raises(CheckpointError, match="truncated"):
        read_header(short)
    with pytest.raises(CheckpointError, match="cannot read"):
        read_header(tmp_path / "nope.safetensors")


def test_overlapping_tensors_are_refused():
    raw = json.dumps(
        {
            "a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
            "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]},
        }
    ).encode()
    with pytest.raises(CheckpointError, match="overlap"):
        parse_header(raw, data_size=8, path="x")


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
_entry = st.fixed_dictionaries(
    {
        "dtype": st.sampled_from(["F32", "BF16", "U8", "F4", "??", 3]),
        "shape": st.lists(st.integers(-2, 6), max_size=3) | _json,
        "data_offsets": st.lists(st.integers(-4, 200), min_size=0, max_size=3) | _json,
    }
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    doc=st.dictionaries(st.text(max_size=8), _entry | _json, max_size=5),
    data_size=st.integers(0, 256),
)
def test_structured_random_headers_only_raise_checkpoint_error(doc, data_size):
    try:
        header = parse_header(json.dumps(doc).encode(), data_size=data_size, path="h")
    except CheckpointError:
        return
    for name, info in header.tensors.items():
        begin, end = header.offsets[name]
        assert 0 <= begin <= end <= data_size and end - begin == info.nbytes


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blob=st.binary(max_size=300), cut=st.integers(0, 400), flip=st.integers(0, 400))
def test_corrupted_files_only_raise_checkpoint_error(tmp_path_factory, blob, cut, flip):
    good = (
        struct.pack("<Q", 56)
        + b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}  '
        + b"x" * 8
    )
    data = bytearray(good[:cut] + blob if cut < len(good) else good + blob)
    if flip < len(data):
        data[flip] ^= 0xFF
    path = tmp_path_factory.mktemp("h") / "f.safetensors"
    path.write_bytes(bytes(data))
    with contextlib.suppress(CheckpointError):  # anything else fails the test
        read_header(path)
