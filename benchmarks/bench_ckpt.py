"""`rankscope ckpt` inspect/diff from headers vs loading the tensors with safetensors.

1. A synthetic Llama-style checkpoint of about 2 GB (~700 tensors, 8 shards, bf16):
   `inspect` and `diff config.json CKPT` vs `safetensors.torch.load_file` of every shard,
   measured in the same run (goal: at least 100x faster).
2. A Llama-70B-shaped checkpoint (723 tensors, 30 shards, real headers, data left sparse on
   disk): `inspect` in-process and `rankscope ckpt inspect --json` as a process (goal < 0.5 s).
3. `convert hf-to-mcore --format torch_dist --tp 2` of the 2 GB checkpoint, each side in its own
   process: rankscope (streams one chunk at a time) vs the stock way on CPU (megatron-core's own
   saver needs CUDA): load every HF tensor, build Megatron's stacked state dict, and
   `torch.distributed.checkpoint.save` it. Peak anonymous memory (RssAnon sampled every 5 ms,
   over the process's own before the conversion; mmap'd input pages are page cache, not counted)
   and wall time; goal: rankscope's peak < 2x the largest tensor + 256 MB.

Run: `python benchmarks/bench_ckpt.py [--size-gb 2] [--repeats 5] [--only-convert]`. Temp files
live under one temp dir that is deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable


def median_s(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def llama_shapes(
    *, hidden: int, inter: int, layers: int, heads: int, kv: int, vocab: int
) -> list[tuple[str, tuple[int, ...]]]:
    hd = hidden // heads
    out: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [
            (p + "self_attn.q_proj.weight", (heads * hd, hidden)),
            (p + "self_attn.k_proj.weight", (kv * hd, hidden)),
            (p + "self_attn.v_proj.weight", (kv * hd, hidden)),
            (p + "self_attn.o_proj.weight", (hidden, heads * hd)),
            (p + "mlp.gate_proj.weight", (inter, hidden)),
            (p + "mlp.up_proj.weight", (inter, hidden)),
            (p + "mlp.down_proj.weight", (hidden, inter)),
            (p + "input_layernorm.weight", (hidden,)),
            (p + "post_attention_layernorm.weight", (hidden,)),
        ]
    out += [("model.norm.weight", (hidden,)), ("lm_head.weight", (vocab, hidden))]
    return out


def write_config(
    folder: str, *, hidden: int, inter: int, layers: int, heads: int, kv: int, vocab: int
) -> None:
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "vocab_size": vocab,
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
    }
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)


def shard(
    shapes: list[tuple[str, tuple[int, ...]]], n: int
) -> list[list[tuple[str, tuple[int, ...]]]]:
    """Contiguous groups of about equal bytes."""
    sizes = [2 * _numel(s) for _, s in shapes]
    target = sum(sizes) / n
    groups: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    acc = 0.0
    for item, size in zip(shapes, sizes, strict=True):
        if acc >= target * len(groups) and len(groups) < n:
            groups.append([])
        groups[-1].append(item)
        acc += size
    return groups


def _numel(shape: tuple[int, ...]) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def write_index(folder: str, groups: list[list[tuple[str, tuple[int, ...]]]]) -> list[str]:
    names = [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
    weight_map = {t: f for f, g in zip(names, groups, strict=True) for t, _ in g}
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return [os.path.join(folder, n) for n in names]


def write_sparse(path: str, tensors: list[tuple[str, tuple[int, ...]]]) -> None:
    """A real safetensors header; the data section is a hole of the right size."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in tensors:
        nbytes = 2 * _numel(shape)
        header[name] = {
            "dtype": "BF16",
            "shape": list(shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + offset)


def bench_2gb(root: str, size_gb: float, repeats: int) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    from rankscope.ckpt import diff, inspect

    layers = max(2, round(77 * size_gb / 2))
    dims = dict(hidden=1024, inter=2816, layers=layers, heads=8, kv=8, vocab=32000)
    folder = os.path.join(root, "synthetic")
    os.makedirs(folder)
    write_config(folder, **dims)
    shapes = llama_shapes(**dims)
    groups = shard(shapes, 8)
    start = time.perf_counter()
    for path, group in zip(write_index(folder, groups), groups, strict=True):
        save_file({n: torch.zeros(s, dtype=torch.bfloat16) for n, s in group}, path)
    total = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    print(
        f"synthetic checkpoint: {len(shapes)} tensors in {len(groups)} shards, "
        f"{total / 1e9:.2f} GB, written in {time.perf_counter() - start:.1f} s"
    )
    files = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))

    def load_all() -> None:
        for f in files:
            load_file(os.path.join(folder, f))

    def load_and_read() -> None:
        for f in files:
            for t in load_file(os.path.join(folder, f)).values():
                t.clone()  # what loading into a model does: every byte read and copied

    config = os.path.join(folder, "config.json")
    assert diff(config, folder).matches  # warm-up: imports transformers once
    lazy = median_s(load_all, repeats)
    load = median_s(load_and_read, max(2, repeats // 2))
    ins = median_s(lambda: inspect(folder), repeats)
    dif = median_s(lambda: diff(config, folder), repeats)
    twin = os.path.join(root, "synthetic-twin")  # the same shards again, hard-linked
    os.makedirs(twin)
    for f in os.listdir(folder):
        os.link(os.path.join(folder, f), os.path.join(twin, f))
    pair = median_s(lambda: diff(folder, twin), repeats)
    print(f"  load_file + read every tensor     : {load * 1e3:9.1f} ms  (median, page cache warm)")
    print(f"  load_file alone (lazy mmap)       : {lazy * 1e3:9.1f} ms")
    print(
        f"  rankscope.ckpt.inspect            : {ins * 1e3:9.1f} ms  "
        f"({load / ins:,.0f}x vs load+read, {lazy / ins:,.1f}x vs lazy load_file)"
    )
    print(
        f"  rankscope.ckpt.diff config ckpt   : {dif * 1e3:9.1f} ms  "
        f"({load / dif:,.0f}x vs load+read, {lazy / dif:,.1f}x vs lazy load_file)"
    )
    print(
        f"  rankscope.ckpt.diff ckpt ckpt     : {pair * 1e3:9.1f} ms  "
        f"({2 * load / pair:,.0f}x vs load+read of both)"
    )


def bench_70b(root: str, repeats: int) -> None:
    from rankscope.ckpt import diff, inspect

    dims = dict(hidden=8192, inter=28672, layers=80, heads=64, kv=8, vocab=128256)
    folder = os.path.join(root, "llama70b")
    os.makedirs(folder)
    write_config(folder, **dims)
    shapes = llama_shapes(**dims)
    groups = shard(shapes, 30)
    for path, group in zip(write_index(folder, groups), groups, strict=True):
        write_sparse(path, group)
    apparent = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    print(
        f"70B-shaped checkpoint: {len(shapes)} tensors in {len(groups)} shards, "
        f"{apparent / 1e9:.0f} GB apparent size (sparse)"
    )
    info = inspect(folder)
    assert info.tensor_count == len(shapes) and info.scheme.layer_count == 80
    config = os.path.join(folder, "config.json")
    ins = median_s(lambda: inspect(folder), repeats)
    dif = median_s(lambda: diff(config, folder), repeats)
    cli = [sys.executable, "-m", "rankscope.cli.main", "ckpt", "inspect", folder, "--json"]
    proc = median_s(lambda: subprocess.run(cli, check=True, stdout=subprocess.DEVNULL), 3)
    print(f"  rankscope.ckpt.inspect            : {ins * 1e3:9.1f} ms  (goal < 500 ms)")
    print(f"  rankscope.ckpt.diff config ckpt   : {dif * 1e3:9.1f} ms")
    print(f"  `rankscope ckpt inspect --json`   : {proc * 1e3:9.1f} ms  (whole process)")


_CONVERT_CHILD = r"""
import json, os, sys, threading, time

def rss_anon():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0

import torch, torch.distributed.checkpoint as dcp
from safetensors.torch import load_file
from rankscope.ckpt import convert
how, src, dst = sys.argv[1:4]
base, peak, stop = rss_anon(), [0], []
def sample():
    while not stop:
        peak[0] = max(peak[0], rss_anon())
        time.sleep(0.005)
threading.Thread(target=sample, daemon=True).start()
start = time.perf_counter()
if how == "rankscope":
    convert("hf-to-mcore", src, dst, tp=2)
else:  # by hand: everything in memory, then one DCP save
    hf = {}
    for f in sorted(os.listdir(src)):
        if f.endswith(".safetensors"):
            hf.update(load_file(os.path.join(src, f)))
    cfg = json.load(open(os.path.join(src, "config.json")))
    n = cfg["num_hidden_layers"]
    def stack(fn):
        return torch.stack([fn(f"model.layers.{i}.") for i in range(n)])
    sd = {
        "embedding.word_embeddings.weight": hf["model.embed_tokens.weight"],
        "decoder.layers.self_attention.linear_qkv.weight": stack(lambda p: torch.cat(
            [hf[p + "self_attn.q_proj.weight"], hf[p + "self_attn.k_proj.weight"],
             hf[p + "self_attn.v_proj.weight"]])),
        "decoder.layers.self_attention.linear_proj.weight": stack(
            lambda p: hf[p + "self_attn.o_proj.weight"]),
        "decoder.layers.mlp.linear_fc1.weight": stack(lambda p: torch.cat(
            [hf[p + "mlp.gate_proj.weight"], hf[p + "mlp.up_proj.weight"]])),
        "decoder.layers.mlp.linear_fc2.weight": stack(lambda p: hf[p + "mlp.down_proj.weight"]),
        "decoder.layers.self_attention.linear_qkv.layer_norm_weight": stack(
            lambda p: hf[p + "input_layernorm.weight"]),
        "decoder.layers.mlp.linear_fc1.layer_norm_weight": stack(
            lambda p: hf[p + "post_attention_layernorm.weight"]),
        "decoder.final_layernorm.weight": hf["model.norm.weight"],
        "output_layer.weight": hf["lm_head.weight"],
    }
    os.makedirs(dst)
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(dst), no_dist=True)
wall = time.perf_counter() - start
stop.append(1)
time.sleep(0.02)
print("RESULT " + json.dumps({"wall": wall, "peak": max(peak[0], rss_anon()) - base}))
"""


def bench_convert(root: str, size_gb: float) -> None:
    import torch
    from safetensors.torch import save_file

    layers = max(2, round(77 * size_gb / 2))
    dims = dict(hidden=1024, inter=2816, layers=layers, heads=8, kv=8, vocab=32000)
    folder = os.path.join(root, "convert-src")
    os.makedirs(folder)
    write_config(folder, **dims)
    shapes = llama_shapes(**dims)
    groups = shard(shapes, 8)
    gen = torch.Generator().manual_seed(0)
    for path, group in zip(write_index(folder, groups), groups, strict=True):
        save_file(
            {n: torch.randn(s, generator=gen, dtype=torch.float32).bfloat16() for n, s in group},
            path,
        )
    largest = max(2 * _numel(s) for _, s in shapes)
    total = sum(2 * _numel(s) for _, s in shapes)
    print(
        f"convert hf-to-mcore --tp 2 of {total / 1e9:.2f} GB bf16 ({len(shapes)} tensors, "
        f"largest {largest / 1e6:.0f} MB; goal: peak < {(2 * largest + (256 << 20)) / 1e6:.0f} MB)"
    )
    results = {}
    for how in ("by-hand", "rankscope"):
        out = os.path.join(root, f"convert-{how}")
        proc = subprocess.run(
            [sys.executable, "-c", _CONVERT_CHILD, how, folder, out],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
        if proc.returncode or not lines:
            print(f"  {how}: failed: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        results[how] = json.loads(lines[-1].removeprefix("RESULT "))
        shutil.rmtree(out, ignore_errors=True)
    for how, r in results.items():
        print(
            f"  {how:<28}: {r['wall']:7.1f} s, peak anonymous memory {r['peak'] / 1e6:7.0f} MB "
            f"({r['peak'] / largest:.1f}x the largest tensor)"
        )
    if len(results) == 2:
        a, b = results["by-hand"], results["rankscope"]
        print(
            f"  rankscope vs by hand          : memory {a['peak'] / max(b['peak'], 1):.1f}x "
            f"lower, time {b['wall'] / a['wall']:.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only-convert", action="store_true")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="rankscope-bench-ckpt-")
    try:
        if not args.only_convert:
            bench_2gb(root, args.size_gb, args.repeats)
            bench_70b(root, args.repeats)
        bench_convert(root, args.size_gb)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
