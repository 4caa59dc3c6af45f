"""`rankscope doctor` over a 3-node local cluster, whole CLI time (goal: < 5 s), against the
stock way: a verl-style one-node version print (it imports torch, transformers, ray and verl to
read their versions) plus `ray status`. Also `doctor --config` (no cluster).

    .venv/bin/python benchmarks/bench_doctor.py [--repeats R]

Run it alone (or under /tmp/rs-cluster-tests.lock on a shared machine): it starts a cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

BIN = pathlib.Path(sys.executable).parent
# Qwen2.5-7B's shape, the one the lint tests use.
QWEN25_7B_CONFIG = pathlib.Path(__file__).parents[1] / "tests/data/qwen2.5-7b-config.json"
VERL_STYLE = """
import platform
import ray, torch, transformers
try:
    import verl
except Exception:
    verl = None
print("python", platform.python_version())
for m in (torch, transformers, ray, verl):
    if m is not None:
        print(m.__name__, getattr(m, "__version__", "?"))
print("cuda", torch.version.cuda, "gpus", torch.cuda.device_count())
"""


def _time(cmd: list[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    return time.perf_counter() - start, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False}
    )
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    env = {**os.environ, "RAY_ADDRESS": cluster.address}
    doctor_cmd = [str(BIN / "rankscope"), "doctor", "--address", cluster.address, "--json"]
    stock = [
        ([sys.executable, "-c", VERL_STYLE], "verl-style versions (one node)"),
        ([str(BIN / "ray"), "status", "--address", cluster.address], "ray status"),
    ]
    try:
        first, code = _time(doctor_cmd, env)  # workers start on every node: the cold run
        nodes = len(
            json.loads(subprocess.run(doctor_cmd, env=env, capture_output=True, text=True).stdout)[
                "data"
            ]["nodes"]
        )
        doctor = [_time(doctor_cmd, env)[0] for _ in range(args.repeats)]
        baseline = []
        for _ in range(args.repeats):
            baseline.append(sum(_time(cmd, env)[0] for cmd, _ in stock))
        with tempfile.TemporaryDirectory() as tmp:
            lint_s = _lint_time(pathlib.Path(tmp), env, args.repeats)
    finally:
        ray.shutdown()
        cluster.shutdown()
    d, b = statistics.median(doctor), statistics.median(baseline)
    print(
        f"rankscope doctor over {nodes} nodes (exit {code}): first run {first:.2f} s, "
        f"median {d:.2f} s of {args.repeats} (goal < 5 s)"
    )
    print(f"stock: {' + '.join(name for _, name in stock)}: median {b:.2f} s")
    print(
        f"ratio doctor / stock: {d / b:.2f}x (doctor checks {nodes} nodes, 13 checks; "
        "the stock pair checks one node's versions and lists resources)"
    )
    print(f"rankscope doctor --config (lint + memory estimate, no cluster): median {lint_s:.2f} s")


def _lint_time(tmp: pathlib.Path, env: dict[str, str], repeats: int) -> float:
    model = tmp / "model"
    model.mkdir()
    shutil.copy(QWEN25_7B_CONFIG, model / "config.json")
    config = tmp / "trainer.yaml"
    config.write_text(
        "data: {train_batch_size: 256, max_prompt_length: 512, max_response_length: 512}\n"
        f"actor_rollout_ref:\n  model: {{path: {model}}}\n"
        "  actor: {ppo_mini_batch_size: 64, ppo_micro_batch_size_per_gpu: 4}\n"
        "  rollout: {n: 1, tensor_model_parallel_size: 4}\n"
        "trainer: {nnodes: 1, n_gpus_per_node: 8}\n"
    )
    env = {k: v for k, v in env.items() if k != "RAY_ADDRESS"}
    cmd = [str(BIN / "rankscope"), "doctor", "--config", str(config), "--gpu-memory", "80"]
    return statistics.median(_time(cmd, env)[0] for _ in range(repeats))


if __name__ == "__main__":
    main()
