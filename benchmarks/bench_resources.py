"""Resources (issue 18): the allocator's plan and the whole `why-pending` CLI.

1. `SmartResourceAllocator.plan` for 1,024 bundles over 128 simulated nodes (goal < 100 ms);
   beside it, the bare first-fit check of the same bundles (`analysis.pack_bundles`, no
   reasons, no GPU memory): Ray has no planning call to compare with.
2. `rankscope why-pending --json` on a 3-node local cluster (dashboard on) with 100 pending
   tasks, whole CLI process (goal < 2 s), against the stock commands of the same run:
   `ray status` (pending demands, no node or holder) and `ray list tasks --filter
   state=PENDING_NODE_ASSIGNMENT` (the tasks, no reason).

`.venv/bin/python benchmarks/bench_resources.py [--trials N] [--only-plan]`; the cluster part
needs the machine's cluster lock (`flock /tmp/rs-cluster-tests.lock ...`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from rankscope.resources import NodeResources, SmartResourceAllocator
from rankscope.resources.analysis import pack_bundles


def simulated_nodes(n: int = 128) -> list[NodeResources]:
    """A quarter 8-GPU gpu_highmem nodes (free memory known, some GPUs busy), half 8-GPU
    nodes, a quarter CPU nodes."""
    nodes = []
    for i in range(n):
        node_id = f"{i:056x}"
        kind = i % 4
        if kind == 3:
            total = {"CPU": 64.0, "memory": 256e9}
            nodes.append(NodeResources(node_id, f"10.0.{i // 256}.{i % 256}", total, dict(total)))
            continue
        total = {"CPU": 96.0, "GPU": 8.0, "memory": 1e12}
        labels = {"node_type": "gpu_highmem"} if kind == 0 else {"node_type": "gpu"}
        free_gb = tuple(70.0 if g % 3 else 2.0 for g in range(8)) if kind == 0 else ()
        nodes.append(
            NodeResources(
                node_id,
                f"10.0.{i // 256}.{i % 256}",
                total,
                {**total, "GPU": 6.0 if i % 5 == 0 else 8.0},
                labels,
                gpu_free_gb=free_gb,
            )
        )
    return nodes


def bench_plan(trials: int) -> None:
    nodes = simulated_nodes()
    bundles = [{"GPU": 1.0, "CPU": 4.0}] * 1024
    alloc = SmartResourceAllocator(
        min_gpu_memory=4, preferred_node_type="gpu_highmem", fallback_strategy="cpu_backup"
    )
    plan_times, bare_times = [], []
    for _ in range(trials):
        t = time.perf_counter()
        plan = alloc.plan(bundles, nodes=nodes)
        plan_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        pack_bundles(bundles[:700], [n.available for n in nodes], "PACK")
        bare_times.append(time.perf_counter() - t)
    plan_ms = 1000 * statistics.median(plan_times)
    bare_ms = 1000 * statistics.median(bare_times)
    print(
        f"plan 1,024 bundles x 128 nodes: {plan_ms:.1f} ms median of {trials} "
        f"({len(plan.on_gpu)} on GPUs, {len(plan.on_cpu_backup)} CPU fallbacks, "
        f"{len(plan.excluded_gpus)} GPUs excluded for memory); goal < 100 ms: "
        f"{'met' if plan_ms < 100 else 'MISSED'}"
    )
    print(f"bare first-fit of the 700 that fit (no reasons, no memory): {bare_ms:.1f} ms")


def _median_run(cmd: list[str], trials: int, env: dict[str, str]) -> tuple[float, int]:
    times, rc = [], 0
    for _ in range(trials):
        t = time.perf_counter()
        rc = subprocess.run(cmd, env=env, capture_output=True, check=False, timeout=120).returncode
        times.append(time.perf_counter() - t)
    return statistics.median(times), rc


def bench_why_pending(trials: int) -> None:
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="rs-bench-res-", dir="/tmp")
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    import ray
    from ray.cluster_utils import Cluster

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": True, "dashboard_port": port},
    )
    try:
        cluster.add_node(num_cpus=1, num_gpus=1)
        cluster.add_node(num_cpus=1, num_gpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)

        @ray.remote(num_gpus=1, num_cpus=0)
        def hold() -> None:
            time.sleep(3600)

        @ray.remote(num_gpus=1, num_cpus=0)
        def later() -> None:
            pass

        held = [hold.remote() for _ in range(2)]
        pending = [later.remote() for _ in range(100)]
        time.sleep(3.0)  # the state API sees them once task events are flushed
        env = {**os.environ, "RAY_ADDRESS": cluster.address}
        bin_dir = os.path.dirname(sys.executable)
        ours, rc = _median_run(
            [sys.executable, "-m", "rankscope.cli.main", "why-pending", "--json"], trials, env
        )
        status, _ = _median_run([os.path.join(bin_dir, "ray"), "status"], trials, env)
        listing, _ = _median_run(
            [
                os.path.join(bin_dir, "ray"),
                "list",
                "tasks",
                "--filter",
                "state=PENDING_NODE_ASSIGNMENT",
                "--limit",
                "1000",
            ],
            trials,
            env,
        )
        print(
            f"why-pending --json, 3 nodes, 100 pending tasks, whole CLI: {ours:.2f} s median of "
            f"{trials} (exit {rc}); goal < 2 s: {'met' if ours < 2 else 'MISSED'}"
        )
        print(f"ray status: {status:.2f} s ({ours / status:.2f}x)")
        print(
            f"ray list tasks --filter state=PENDING_NODE_ASSIGNMENT: {listing:.2f} s "
            f"({ours / listing:.2f}x)"
        )
        del held, pending
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(os.environ["RAY_TMPDIR"], ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--only-plan", action="store_true")
    args = parser.parse_args()
    bench_plan(max(args.trials, 11))
    if not args.only_plan:
        bench_why_pending(args.trials)


if __name__ == "__main__":
    main()
