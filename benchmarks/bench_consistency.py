"""Cross-rank tensor consistency benchmarks (issue 5), stock alternatives measured in the same run.

1. Fingerprint throughput vs a plain `tensor.sum()` over the same tensors (goal >= 0.5x).
2. A whole check of a ~100M-parameter state dict across 4 gloo ranks vs a host copy + hashlib
   SHA-1 of every tensor with the digests all-gathered (Megatron's
   check_param_hashes_across_dp_replicas style) (goal >= 5x faster).
3. Bytes each rank sends for 1,000 tensors (goal < 200 KB).

Run: `.venv/bin/python benchmarks/bench_consistency.py [--params 100e6] [--repeats 5]`
(`--sections 1`: the throughput benchmark alone; `--against REV`: also the torch-ops
fingerprint as it was at git revision REV, in the same trials).
Timings alternate between the two sides of each comparison and report medians, so that load
from other processes hits both alike. On a GPU (when one is present) benchmark 1 also runs on it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import socket
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


# ------------------------------------------------------------------------------ tensor sets
def transformer_state(params: float, device: str = "cpu", seed: int = 0) -> dict[str, torch.Tensor]:
    """A GPT-like state dict (embeddings, 12 layers of attention/MLP/norms) of about `params`."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    d = 768
    per_layer = 12 * d * d + 13 * d
    vocab = max(1000, int((params - 12 * per_layer) / d))
    shapes: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (vocab, d)}
    for i in range(12):
        p = f"layers.{i}."
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            shapes[p + f"self_attn.{name}.weight"] = (d, d)
            shapes[p + f"self_attn.{name}.bias"] = (d,)
        shapes[p + "mlp.up_proj.weight"] = (4 * d, d)
        shapes[p + "mlp.up_proj.bias"] = (4 * d,)
        shapes[p + "mlp.down_proj.weight"] = (d, 4 * d)
        shapes[p + "mlp.down_proj.bias"] = (d,)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            shapes[p + f"{norm}.weight"] = (d,)
            shapes[p + f"{norm}.bias"] = (d,)
    shapes["norm.weight"] = (d,)
    return {n: torch.randn(s, generator=gen).to(device) for n, s in shapes.items()}


def many_small(count: int, numel: int, device: str = "cpu") -> dict[str, torch.Tensor]:
    gen = torch.Generator(device="cpu").manual_seed(1)
    return {f"block.{i}.weight": torch.randn(numel, generator=gen).to(device) for i in range(count)}


def nbytes(tensors: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())


def alternate(
    fns: dict[str, Callable[[], Any]],
    repeats: int,
    sync: Callable[[], None],
    cpu: dict[str, float] | None = None,
) -> dict[str, float]:
    """Median seconds of each function, run in turns (and into `cpu`, when given, the median
    CPU seconds of this process: on cores shared with other jobs, a steadier figure)."""
    for fn in fns.values():  # warm up (caches, constant tables, allocator)
        fn()
    sync()
    times: dict[str, list[float]] = {k: [] for k in fns}
    cpu_times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            sync()
            times[name].append(time.perf_counter() - start)
            cpu_times[name].append(time.process_time() - start_cpu)
    if cpu is not None:
        cpu.update({k: statistics.median(v) for k, v in cpu_times.items()})
    return {k: statistics.median(v) for k, v in times.items()}


# ------------------------------------------------------------------------------ benchmark 1
def bench_throughput(
    device: str, repeats: int, big_params: float, against: str | None = None
) -> None:
    from rankscope.consistency import cpu_hash
    from rankscope.consistency.fingerprint import fingerprint_tensors, summarize_tensors

    before = _fingerprint_at(against) if against else None

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    cases = {
        f"GPT-like state dict ({big_params / 1e6:.0f}M params, 197 tensors)": transformer_state(
            big_params, device
        ),
        "4 large tensors (16M float32 each)": many_small(4, 16_000_000, device),
        "2,000 small tensors (4K float32 each)": many_small(2000, 4096, device),
    }
    threads = torch.get_num_threads()
    kernel = "numba kernel" if cpu_hash.available() and device == "cpu" else "torch ops"
    print(f"\n[1] fingerprint throughput vs tensor.sum() on {device}, {threads} threads")
    print(f"    fingerprint: {kernel}; torch ops: the same hashes without numba (as on a GPU)")
    head = f"{'sum()':>9} {'fingerprint':>12} {'ratio':>6} {'torch ops':>10} {'ratio':>6}"
    print(f"    {'tensors':44} {head} {'full summaries':>15} {'ratio':>6}")
    for label, tensors in cases.items():
        items = list(tensors.items())
        values = list(tensors.values())
        c: dict[str, float] = {}
        fns = {
            "sum": lambda values=values: [v.sum() for v in values],
            "fingerprint": lambda items=items: fingerprint_tensors(items),
            "torch": lambda items=items: without_kernel(fingerprint_tensors, items),
            "full": lambda items=items: summarize_tensors(items),
        }
        if before is not None:
            fns["before"] = lambda items=items: without_kernel(before.fingerprint_tensors, items)
        t = alternate(fns, repeats, sync, c)
        gbs = nbytes(tensors) / 1e9
        print(
            f"    {label:44} {t['sum'] * 1e3:7.1f}ms {t['fingerprint'] * 1e3:10.1f}ms "
            f"{t['sum'] / t['fingerprint']:5.2f}x {t['torch'] * 1e3:8.1f}ms "
            f"{t['sum'] / t['torch']:5.2f}x {t['full'] * 1e3:13.1f}ms "
            f"{t['sum'] / t['full']:5.2f}x   ({gbs / t['fingerprint']:.1f} GB/s)"
        )
        print(
            f"    {'  by CPU time (process)':44} {c['sum'] * 1e3:7.1f}ms "
            f"{c['fingerprint'] * 1e3:10.1f}ms {c['sum'] / c['fingerprint']:5.2f}x "
            f"{c['torch'] * 1e3:8.1f}ms {c['sum'] / c['torch']:5.2f}x "
            f"{c['full'] * 1e3:13.1f}ms {c['sum'] / c['full']:5.2f}x"
        )
        if before is not None:
            print(
                f"    {'  torch ops at ' + str(against) + ', CPU time':44} {c['sum'] * 1e3:7.1f}ms "
                f"{'':10}   {'':5}  {c['before'] * 1e3:8.1f}ms {c['sum'] / c['before']:5.2f}x"
            )
        del tensors, items, values


def _fingerprint_at(revision: str) -> Any:
    """consistency/fingerprint.py with its torch_hash.py as they were at `revision`."""
    from at_revision import load, source_at

    root = "src/rankscope/consistency/"
    load("torch_hash_at_revision", source_at(revision, root + "torch_hash.py"))
    return load(
        "fingerprint_at_revision",
        source_at(revision, root + "fingerprint.py").replace(
            "from rankscope.consistency.torch_hash import", "from torch_hash_at_revision import"
        ),
    )


def without_kernel(fn: Callable[..., Any], *args: Any) -> Any:
    """Run `fn` with the CPU kernel switched off: the torch-ops path a GPU (or no numba) takes."""
    from rankscope.consistency import cpu_hash

    available = cpu_hash.available
    cpu_hash.available = lambda: False  # type: ignore[method-assign]
    try:
        return fn(*args)
    finally:
        cpu_hash.available = available  # type: ignore[method-assign]


# ------------------------------------------------------------------------------ benchmark 2
def _sha1_check(state: dict[str, torch.Tensor]) -> bool:
    """The stock check: copy every tensor to the host, SHA-1 it, all-gather the digests."""
    import torch.distributed as dist

    digests = []
    for name, t in state.items():
        host = t.detach().cpu().contiguous()
        # hashlib reads the array's buffer in place: no extra copy beyond the host copy itself
        digests.append((name, hashlib.sha1(host.view(torch.uint8).numpy()).hexdigest()))
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, digests)
    return all(d == everyone[0] for d in everyone)


def _rank_main(rank: int, world: int, port: int, params: float, repeats: int, out: Any) -> None:
    import torch.distributed as dist

    import rankscope

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    state = transformer_state(params)
    times: dict[str, list[float]] = {"rankscope": [], "sha1": []}
    checks = {
        "rankscope": lambda: rankscope.verify_distributed_tensors(state, operation_name="bench").ok,
        "sha1": lambda: _sha1_check(state),
    }
    for fn in checks.values():
        assert fn()
    for _ in range(repeats):
        for name, fn in checks.items():
            dist.barrier()
            start = time.perf_counter()
            fn()
            dist.barrier()
            times[name].append(time.perf_counter() - start)
    # One rank drifts in one large tensor: the cost of finding it, with the exact difference.
    if rank == 2:
        state["layers.5.mlp.up_proj.weight"][7, 7] += 1e-3
    drifts = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        report = rankscope.verify_distributed_tensors(state, operation_name="bench")
        dist.barrier()
        drifts.append(time.perf_counter() - start)
    drift_s = statistics.median(drifts)
    if rank == 0:
        out.put(
            {
                "rankscope": statistics.median(times["rankscope"]),
                "sha1": statistics.median(times["sha1"]),
                "drift": drift_s,
                "summary": report.summary,
                "bytes": nbytes(state),
            }
        )
    dist.destroy_process_group()


def bench_whole_check(params: float, repeats: int) -> None:
    import torch.multiprocessing as mp

    world = 4
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_rank_main, args=(r, world, port, params, repeats, queue))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    result = queue.get(timeout=600)
    for p in procs:
        p.join(60)
    print(
        f"\n[2] whole check of a {params / 1e6:.0f}M-parameter state dict "
        f"({result['bytes'] / 1e6:.0f} MB per rank), 4 gloo ranks on {os.cpu_count()} cores, "
        "1 thread per rank"
    )
    print(f"    host copy + hashlib SHA-1 + all-gather digests: {result['sha1'] * 1e3:8.1f} ms")
    print(
        f"    rankscope.verify_distributed_tensors:           {result['rankscope'] * 1e3:8.1f} ms"
    )
    print(f"    ratio: {result['sha1'] / result['rankscope']:.1f}x faster")
    print(
        f"    one rank drifted in one 2.4M-element tensor: {result['drift'] * 1e3:.1f} ms "
        "(median), reporting"
    )
    print(f"      {result['summary']}")


# ------------------------------------------------------------------------------ benchmark 3
def bench_bytes() -> None:
    from rankscope.consistency.fingerprint import fingerprint_tensors
    from rankscope.consistency.model import RankFingerprints
    from rankscope.consistency.worker_transport import encode

    names = []
    for i in range(62):
        for part in (
            "self_attn.q_proj.weight",
            "self_attn.k_proj.weight",
            "self_attn.v_proj.weight",
            "self_attn.o_proj.weight",
            "self_attn.q_proj.bias",
            "self_attn.k_proj.bias",
            "self_attn.v_proj.bias",
            "self_attn.o_proj.bias",
            "mlp.gate_proj.weight",
            "mlp.up_proj.weight",
            "mlp.down_proj.weight",
            "mlp.up_proj.bias",
            "input_layernorm.weight",
            "input_layernorm.bias",
            "post_attention_layernorm.weight",
            "post_attention_layernorm.bias",
        ):
            names.append(f"model.layers.{i}.{part}")
    names = ["model.embed_tokens.weight", "lm_head.weight", *names][:1000]
    names += [f"model.extra.{i}" for i in range(1000 - len(names))]
    items = [(n, torch.randn(64)) for n in names]
    payload = encode(RankFingerprints(0, tuple(fingerprint_tensors(items))))
    world = 4
    digests = [(n, hashlib.sha1(b"x").hexdigest()) for n in names]
    import pickle

    sha1_payload = len(pickle.dumps(digests))
    print(
        "\n[3] bytes each rank contributes for 1,000 tensors "
        "(names like model.layers.17.mlp.up_proj.weight)"
    )
    print(f"    rankscope round-1 payload (fingerprints, compressed): {len(payload) / 1e3:6.1f} KB")
    print(
        f"    sent by one rank in a ring all-gather over {world} ranks: "
        f"{(world - 1) * len(payload) / 1e3:6.1f} KB (forwards the others' payloads too)"
    )
    print(
        f"    for comparison, SHA-1 hex digests with names, pickled: {sha1_payload / 1e3:6.1f} KB"
    )
    print(
        "    rounds 2-3 run only when hashes differ: the differing tensors (within the budget) and"
    )
    print("    one small record per differing tensor")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--params", type=float, default=100e6, help="state dict size for [1] and [2]"
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--sections", default="123", help="which benchmarks to run, e.g. 1 for throughput only"
    )
    parser.add_argument("--against", help="also the torch-ops fingerprint at this git revision")
    args = parser.parse_args()
    print(f"torch {torch.__version__}; {os.cpu_count()} CPU cores")
    if "1" in args.sections:
        bench_throughput("cpu", args.repeats, args.params, args.against)
        if torch.cuda.is_available():
            bench_throughput("cuda", args.repeats, args.params)
    if "2" in args.sections:
        bench_whole_check(args.params, max(3, args.repeats // 2))
    if "3" in args.sections:
        bench_bytes()


if __name__ == "__main__":
    main()
