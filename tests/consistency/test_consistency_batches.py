"""Small tensors hashed in batches by torch ops: alike tensors share one strided view, the
others are padded; both must give the kernel's (and the chunked scan's) hashes."""

from __future__ import annotations

import pytest
import torch

from rankscope.consistency import cpu_hash, torch_hash
from rankscope.consistency.fingerprint import fingerprint_tensors


def _tensors() -> list[tuple[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(7)
    out = []
    for dtype, numel, count in [
        (torch.float32, 4096, 5),  # 2 rows and 6 words each, alike
        (torch.float32, 2042, 3),  # exactly 1 row
        (torch.float64, 7, 4),  # no whole row
        (torch.bfloat16, 1021 * 4 * 3, 2),  # 3 rows
        (torch.float16, 777, 3),  # not whole words: padded instead
        (torch.int64, 1021 * 16, 2),  # the largest small tensor
        (torch.float32, 10, 1),  # one of its kind: padded
    ]:
        for k in range(count):
            x = torch.randn(numel, generator=gen) * 30
            out.append((f"{dtype}-{numel}-{k}", x.to(dtype)))
    out[1][1][3] = float("nan")
    return out


@pytest.mark.parametrize("batch_words", [torch_hash.CHUNK_WORDS // 8, 2 * torch_hash.CHUNK_WORDS])
def test_batched_torch_ops_hash_like_the_kernel(monkeypatch, batch_words):
    tensors = _tensors()
    assert cpu_hash.available()
    kernel = fingerprint_tensors(tensors)
    monkeypatch.setattr(cpu_hash, "available", lambda: False)
    monkeypatch.setitem(torch_hash._BATCH_WORDS, "cpu", batch_words)
    ops = fingerprint_tensors(tensors)
    assert [(f.hash, f.nan, f.inf) for f in ops] == [(f.hash, f.nan, f.inf) for f in kernel]
    assert ops[1].nan == 1 and sum(f.nan for f in ops) == 1


def test_alike_tensors_hash_as_each_alone(monkeypatch):
    monkeypatch.setattr(cpu_hash, "available", lambda: False)
    tensors = _tensors()
    together = fingerprint_tensors(tensors)
    assert together == [fingerprint_tensors([t])[0] for t in tensors]
