"""Fingerprints where the tensor lives: exact hashes for every dtype and layout, summaries."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rankscope.consistency import cpu_hash, torch_hash
from rankscope.consistency import fingerprint as fpmod
from rankscope.consistency.fingerprint import (
    difference,
    fingerprint_tensors,
    summarize_tensors,
)
from rankscope.consistency.flatten import flatten_tensors
from rankscope.errors import UserError

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.complex64,
    torch.float8_e4m3fn,
]


@pytest.fixture(params=["kernel", "torch ops"])
def path(request, monkeypatch):
    """Each hashing test runs on the numba kernel and on the torch ops (GPUs, no numba)."""
    if request.param == "torch ops":
        monkeypatch.setattr(cpu_hash, "available", lambda: False)
    else:
        assert cpu_hash.available(), "numba (the torch extra) should be installed for tests"
    return request.param


def torch_ops_hash(t: torch.Tensor) -> int:
    """The hash as the torch-ops path computes it, chunk by chunk (what a GPU rank does)."""
    scan = torch_hash.scan_tensor(fpmod._flat(t))
    return int(torch_hash.avalanche(torch_hash.np.array([int(scan.hash) & (2**64 - 1)]))[0])


def one_hash(t: torch.Tensor) -> int:
    return fingerprint_tensors([("t", t)])[0].hash


def sample(dtype: torch.dtype, n: int = 777) -> torch.Tensor:
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(n, generator=gen) * 20
    if dtype == torch.bool:
        return x > 0
    if dtype.is_complex:
        return torch.complex(x, -x).to(dtype)
    return x.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_equal_bytes_hash_equal_and_one_changed_element_does_not(dtype, path):
    x = sample(dtype)
    assert one_hash(x.clone()) == one_hash(x)
    y = x.clone()
    y[100] = ~y[100] if dtype == torch.bool else (y[101] if y[100] != y[101] else y[102])
    assert not torch.equal(x.view(torch.uint8), y.view(torch.uint8))
    assert one_hash(y) != one_hash(x)
    fp = fingerprint_tensors([("w", x)])[0]
    assert (fp.name, fp.shape, fp.dtype, fp.nan, fp.inf) == ("w", (777,), str(dtype)[6:], 0, 0)


@pytest.mark.parametrize("n", [1021 * 16 * 4, 1021 * 128 * 2 + 5, 3_000_001])
def test_large_tensors_chunk_by_chunk(n, path):
    x = torch.randn(n, generator=torch.Generator().manual_seed(1))
    y = x.clone()
    y[n - 1] += 1.0  # the very last word of the very last chunk
    assert one_hash(x) == one_hash(x.clone()) != one_hash(y)


def test_order_matters_not_only_the_values(path):
    x = torch.randn(1024, 1024, generator=torch.Generator().manual_seed(2))
    assert one_hash(x.t().contiguous()) != one_hash(x)
    swapped = x.clone().view(-1)
    swapped[[10, 11]] = swapped[[11, 10]]
    assert one_hash(swapped.view(1024, 1024)) != one_hash(x)
    assert one_hash(torch.roll(x, 1)) != one_hash(x)


def test_strides_and_offsets_do_not_change_the_hash(path):
    x = torch.randn(64, 48)
    assert one_hash(x.t()) == one_hash(x.t().contiguous())
    sliced = x.bfloat16()[3, 1:30]  # a view starting mid-word
    assert one_hash(sliced) == one_hash(sliced.clone())
    assert one_hash(x[:, ::3]) == one_hash(x[:, ::3].contiguous())


def test_zero_element_and_scalar(path):
    empty = fingerprint_tensors([("e", torch.empty(0, 8))])[0]
    assert empty.shape == (0, 8) and empty.nan == 0
    assert one_hash(torch.tensor(2.5)) == one_hash(torch.tensor([2.5]))  # shape is compared apart
    assert one_hash(torch.tensor(2.5)) != one_hash(torch.tensor(3.5))
    s = summarize_tensors([("e", torch.empty(0)), ("s", torch.tensor(-2.0))])
    assert s["e"].minimum is None and s["e"].sum == 0.0 and s["e"].sumsq == 0.0
    assert (s["s"].sum, s["s"].sumsq, s["s"].minimum, s["s"].maximum) == (-2.0, 4.0, -2.0, -2.0)


def test_small_tensors_batched_hash_like_the_chunked_path():
    for n in (1, 7, 1020, 1021, 1022, 5000, 1021 * 16):
        for dtype in (torch.float32, torch.bfloat16, torch.uint8, torch.float64):
            flat = fpmod._flat(sample(dtype, n))
            hashes, probes = torch_hash.Results(), torch_hash.Results()
            torch_hash.hash_batch([0], [flat], hashes, probes)
            assert hashes.items()[0][1] == int(torch_hash.scan_tensor(flat).hash), (n, dtype)


CHUNK = torch_hash.CHUNK_WORDS * 8


@pytest.mark.parametrize("dtype", [*DTYPES[:-1], torch.complex128], ids=str)
@pytest.mark.parametrize(
    "nbytes", [0, 8, 13, 8 * 1021 * 4 + 6, CHUNK - 8, CHUNK, CHUNK + 2, 3 * CHUNK + 8 * 1021 + 4]
)
def test_kernel_hashes_like_the_torch_ops(dtype, nbytes):
    """CPU ranks (kernel) and GPU ranks (torch ops) must agree on every dtype and size."""
    size = torch.empty(0, dtype=dtype).element_size()
    x = sample(dtype, max(0, nbytes // size))
    assert one_hash(x) == torch_ops_hash(x)


@settings(max_examples=60, deadline=None)
@given(
    data=st.binary(min_size=0, max_size=4000),
    repeat=st.integers(1, 700),
    dtype=st.sampled_from([torch.uint8, torch.float16, torch.float32, torch.float64]),
)
def test_kernel_hashes_like_the_torch_ops_on_any_bytes(data, repeat, dtype):
    raw = torch.frombuffer(bytearray(data * repeat + bytes(16)), dtype=torch.uint8)
    size = torch.empty(0, dtype=dtype).element_size()
    x = raw[: len(raw) // size * size].view(dtype)
    tensors = [("x", x), ("from 1", x[1:]), ("half", x[: x.numel() // 2]), ("odd", x[::3])]
    prints = fingerprint_tensors(tensors)
    assert [f.hash for f in prints] == [torch_ops_hash(t) for _, t in tensors]
    if dtype.is_floating_point:  # random bytes hold NaN and Inf: the probe must see each one
        counted = [(f.nan, f.inf) for f in prints]
        assert counted == [(int(t.isnan().sum()), int(t.isinf().sum())) for _, t in tensors]


def test_a_tensor_hashes_the_same_alone_or_among_others(path):
    tensors = [(f"t{i}", sample(torch.float32, 50 + i)) for i in range(20)]
    together = fingerprint_tensors(tensors)
    alone = [fingerprint_tensors([t])[0] for t in tensors]
    assert together == alone


def _hash_in_child(queue, tensor):
    queue.put(one_hash(tensor))  # no torch ops of its own: OpenMP itself is not fork-safe


def test_a_forked_child_still_fingerprints_with_threads():
    """The parent's worker threads do not survive fork(); the child must not wait for them."""
    import multiprocessing

    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # 16 MB over 2 threads: the parent's pool starts
    try:
        tensor = torch.ones(4_000_000)
        expected = one_hash(tensor)
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        child = ctx.Process(target=_hash_in_child, args=(queue, tensor))
        child.start()
        try:
            assert queue.get(timeout=30) == expected
        finally:
            child.kill()
            child.join(10)
    finally:
        torch.set_num_threads(threads)


def test_gpu_sized_chunks_give_the_same_hash(monkeypatch):
    """CUDA scans in bigger chunks; the hash is defined so that it does not change."""
    x = torch.randn(1021 * 128 * 40 + 3)
    expected = torch_ops_hash(x)
    monkeypatch.setattr(torch_hash, "_CPU_CHUNK_BYTES", torch_hash._CUDA_CHUNK_BYTES)
    assert torch_ops_hash(x) == expected == one_hash(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [10, 400_000])
def test_nan_and_inf_counted(dtype, n, path):
    x = torch.zeros(n, dtype=dtype)
    x[1], x[3], x[5] = float("nan"), float("inf"), -float("inf")
    fp = fingerprint_tensors([("x", x), ("ok", torch.ones(n, dtype=dtype))])
    assert (fp[0].nan, fp[0].inf) == (1, 2)
    assert (fp[1].nan, fp[1].inf) == (0, 0)


def test_summaries_match_torch():
    x = torch.randn(300_000, generator=torch.Generator().manual_seed(5))
    i = torch.arange(-50, 50)
    b = torch.tensor([True, False, True])
    s = summarize_tensors([("x", x), ("i", i), ("b", b)])
    assert s["x"].sum == pytest.approx(float(x.double().sum()), abs=1e-2)
    assert s["x"].sumsq == pytest.approx(float((x.double() ** 2).sum()), rel=1e-5)
    assert (s["x"].minimum, s["x"].maximum) == (float(x.min()), float(x.max()))
    assert (s["i"].sum, s["i"].minimum, s["i"].maximum) == (-50.0, -50.0, 49.0)
    assert s["i"].sumsq == pytest.approx(float((i.double() ** 2).sum()))
    assert (s["b"].sum, s["b"].minimum, s["b"].maximum) == (2.0, 0.0, 1.0)


def test_difference_exact_and_nan_aware():
    ref = torch.tensor([1.0, 2.0, float("nan"), 0.0])
    mine = torch.tensor([1.0, 2.5, float("nan"), 0.0])
    assert difference(mine, ref) == fpmod.Difference(0.5, 0.25)
    assert (
        difference(torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 2.0])).max_abs == math.inf
    )
    assert difference(torch.tensor([True]), torch.tensor([False])).max_abs == 1.0
    assert difference(torch.empty(0), torch.empty(0)).max_abs == 0.0


def test_difference_edge_values():
    inf = math.inf
    same = torch.tensor([inf, -inf, 0.0, -0.0, 3.0])
    assert difference(same, torch.tensor([inf, -inf, -0.0, 0.0, 3.0])) == fpmod.Difference(0, 0)
    assert difference(torch.tensor([1.0, inf]), torch.tensor([1.0, -inf])).max_abs == inf
    assert difference(torch.tensor([0.5]), torch.tensor([0.0])) == fpmod.Difference(0.5, inf)
    z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    assert difference(z + 0.25j, z) == fpmod.Difference(0.25, 0.125)
    big = torch.zeros(300_000, dtype=torch.bfloat16)
    big[123_456] = 2.0
    assert difference(big, torch.zeros_like(big)) == fpmod.Difference(2.0, inf)


def test_flatten_module_with_buffers_and_grads():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    model(torch.randn(4, 3)).sum().backward()
    names = [n for n, _ in flatten_tensors(model, include_grads=True).tensors]
    assert names[:4] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert "1.running_mean" in names and "1.num_batches_tracked" in names
    assert names[-4:] == ["0.weight.grad", "0.bias.grad", "1.weight.grad", "1.bias.grad"]
    assert not any(n.endswith(".grad") for n, _ in flatten_tensors(model).tensors)


def test_flatten_nested_mappings_and_sequences():
    flat = flatten_tensors(
        {"opt": {"state": [{"exp_avg": torch.ones(1)}], "lr": 0.1}, "w": torch.zeros(2)}
    )
    assert [n for n, _ in flat.tensors] == ["opt.state.0.exp_avg", "w"]
    assert flat.skipped == ("opt.lr",)
    with pytest.raises(UserError, match="expected a mapping of tensors"):
        flatten_tensors(42)
    with pytest.raises(UserError, match=r"both named 'a\.b'"):
        flatten_tensors({"a": {"b": torch.ones(1)}, "a.b": torch.ones(1)})


def test_without_group_or_ranks_says_what_to_pass(monkeypatch):
    import rankscope

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(UserError, match=r"pass ranks=\[\.\.\.\]"):
        rankscope.verify_distributed_tensors({"w": torch.ones(2)})
    with pytest.raises(UserError, match="tolerance must be >= 0"):
        rankscope.verify_distributed_tensors({"w": torch.ones(2)}, tolerance=-1)
