"""`rankscope comm-bench`: the links the job will use, measured before it runs.

One rank per chosen node (node-pinned Ray actors, `num_cpus=0`) forms its own process group:
a side group in processes of its own, which never touches any job's groups. nccl when every
chosen node has GPUs, else gloo (as the job would). Collectives over message sizes from 1 KB
up, as long as the time budget lasts (rank 0 decides for all, by a broadcast, so that every
rank runs the same calls); then send/recv between every pair of nodes, one pair at a time.
"""

from __future__ import annotations

import itertools
import statistics
import time
from datetime import timedelta
from typing import Any

from rankscope.errors import UserError
from rankscope.monitor.comm import (
    CollectiveBandwidth,
    CommBench,
    PairLink,
    bus_bandwidth,
    message_sizes,
    slow_pairs,
)

__all__ = ["BenchRank", "run_comm_bench"]

PING_BYTES = 1 << 10
PING_ROUNDS = 20
STREAM_BYTES = 16 << 20
JOIN_TIMEOUT_S = 120.0


def _iterations(size: int) -> int:
    """Calls timed per message size: enough that small messages are not one scheduler tick."""
    return 50 if size <= 256 << 10 else 10 if size <= 4 << 20 else 3


class BenchRank:
    """One rank of the side group (a Ray actor on one node)."""

    def __init__(self, rank: int, world_size: int, backend: str) -> None:
        self.rank, self.world_size, self.backend = rank, world_size, backend

    def address(self) -> tuple[str, int]:
        import socket

        with socket.socket() as s:
            s.bind(("", 0))
            return socket.gethostbyname(socket.gethostname()), s.getsockname()[1]

    def join(self, host: str, port: int) -> None:
        import torch
        import torch.distributed as dist

        if self.backend == "nccl":
            torch.cuda.set_device(0)
        dist.init_process_group(
            self.backend,
            init_method=f"tcp://{host}:{port}",
            rank=self.rank,
            world_size=self.world_size,
            timeout=timedelta(seconds=JOIN_TIMEOUT_S),
        )

    def _device(self) -> Any:
        import torch

        return torch.device("cuda", 0) if self.backend == "nccl" else torch.device("cpu")

    def _sync(self) -> None:
        if self.backend == "nccl":
            import torch

            torch.cuda.synchronize()

    def _timed(self, fn: Any, iters: int) -> float:
        import torch.distributed as dist

        fn()  # warm up
        self._sync()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        self._sync()
        return (time.perf_counter() - start) / iters

    def collectives(self, sizes: list[int], budget_s: float) -> list[tuple[str, int, float]]:
        import torch
        import torch.distributed as dist

        device, n, out = self._device(), self.world_size, []
        start = time.perf_counter()
        for size in sizes:
            go = torch.tensor([int(time.perf_counter() - start < budget_s)], device=device)
            dist.broadcast(go, 0)  # rank 0's clock decides, so every rank runs the same calls
            if not int(go.item()):
                break
            iters = _iterations(size)
            x = torch.ones(size // 4, dtype=torch.float32, device=device)
            out.append(("all_reduce", size, self._timed(lambda x=x: dist.all_reduce(x), iters)))
            per = max(1, size // 4 // n)
            inp = torch.ones(per, dtype=torch.float32, device=device)
            gathered = [torch.empty_like(inp) for _ in range(n)]
            seconds = self._timed(lambda i=inp, g=gathered: dist.all_gather(g, i), iters)
            out.append(("all_gather", per * 4 * n, seconds))
        return out

    def pair(self, peer: int, first: bool) -> tuple[float, float]:
        """Ping-pong latency and one-way bandwidth with `peer`; `first` sends first."""
        import torch
        import torch.distributed as dist

        device = self._device()
        small = torch.ones(PING_BYTES // 4, device=device)
        big = torch.ones(STREAM_BYTES // 4, device=device)
        ack = torch.ones(1, device=device)

        def ping() -> None:
            if first:
                dist.send(small, peer)
                dist.recv(small, peer)
            else:
                dist.recv(small, peer)
                dist.send(small, peer)

        def stream() -> None:
            if first:
                dist.send(big, peer)
                dist.recv(ack, peer)
            else:
                dist.recv(big, peer)
                dist.send(ack, peer)

        ping()
        self._sync()
        start = time.perf_counter()
        for _ in range(PING_ROUNDS):
            ping()
        self._sync()
        latency = (time.perf_counter() - start) / PING_ROUNDS / 2
        stream()
        start = time.perf_counter()
        for _ in range(3):
            stream()
        self._sync()
        seconds = (time.perf_counter() - start) / 3
        return latency, STREAM_BYTES / seconds / 1e9

    def leave(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def _alive_nodes() -> list[dict[str, Any]]:
    import ray

    return [n for n in ray.nodes() if n.get("Alive")]


def _live_ranks_on(node_ids: set[str]) -> list[str]:
    """Live registered ranks on these nodes (a job is running there)."""
    from rankscope.runtime.client import HubClient
    from rankscope.runtime.hub import find_hub
    from rankscope.runtime.protocol import ProbeState

    if find_hub() is None:
        return []
    try:
        probes = HubClient.attach(None, check_version=False).probes()
    except Exception:
        return []
    return [
        f"{p.context.label} of job {p.context.job_id} on {p.context.node_ip}"
        for p in probes
        if p.state == ProbeState.ALIVE and p.context.node_id in node_ids
    ]


def run_comm_bench(
    address: str | None,
    *,
    nodes: list[str] | None = None,
    live: bool = False,
    budget_s: float = 20.0,
    max_bytes: int = 256 << 20,
) -> CommBench:
    """Measure collectives and node pairs on the chosen nodes (default: every alive node)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from rankscope.runtime.client import connect

    connect(address)
    alive = _alive_nodes()
    chosen = [n for n in alive if not nodes or n["NodeManagerAddress"] in nodes]
    if nodes and len(chosen) < len(set(nodes)):
        have = ", ".join(sorted(n["NodeManagerAddress"] for n in alive))
        raise UserError(f"--nodes {','.join(nodes)}: not all are alive nodes ({have})")
    if len(chosen) < 2:
        raise UserError(f"comm-bench needs 2 or more nodes; {len(chosen)} chosen")
    busy = _live_ranks_on({n["NodeID"] for n in chosen})
    if busy and not live:
        raise UserError(
            f"{len(busy)} live ranks run on these nodes ({busy[0]}, ...): comm-bench would share "
            "their GPUs and links; run it before the job, on other nodes (--nodes), or pass --live"
        )
    gpus = all(n.get("Resources", {}).get("GPU", 0) >= 1 for n in chosen)
    backend = "nccl" if gpus else "gloo"
    actor: Any = ray.remote(BenchRank)
    ranks: list[Any] = [
        actor.options(
            num_cpus=0,
            num_gpus=1 if gpus else 0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
            runtime_env={"env_vars": {"RANKSCOPE_ROLE": "hub"}},  # no probe, no recorder
        ).remote(i, len(chosen), backend)
        for i, n in enumerate(chosen)
    ]
    try:
        host, port = ray.get(ranks[0].address.remote(), timeout=60)
        ray.get([r.join.remote(host, port) for r in ranks], timeout=JOIN_TIMEOUT_S)
        sizes = message_sizes(largest=max_bytes)
        timed = ray.get([r.collectives.remote(sizes, budget_s) for r in ranks])
        collectives = []
        for i, (op, nbytes, _) in enumerate(timed[0]):
            seconds = max(t[i][2] for t in timed)  # the slowest rank's view of each call
            algbw, busbw = bus_bandwidth(op, nbytes, seconds, len(chosen))
            collectives.append(CollectiveBandwidth(op, nbytes, seconds, algbw, busbw))
        pairs = []
        ips = [n["NodeManagerAddress"] for n in chosen]
        for a, b in itertools.combinations(range(len(chosen)), 2):
            got = ray.get([ranks[a].pair.remote(b, True), ranks[b].pair.remote(a, False)])
            pairs.append(
                PairLink(
                    ips[a],
                    ips[b],
                    statistics.fmean(g[0] for g in got),
                    min(g[1] for g in got),
                )
            )
        ray.get([r.leave.remote() for r in ranks], timeout=30)
    finally:
        for r in ranks:
            ray.kill(r)
    note = (
        f"shared the nodes with {len(busy)} live ranks (--live): lower than the links give"
        if busy
        else ""
    )
    return CommBench(
        backend, tuple(ips), tuple(collectives), tuple(pairs), tuple(slow_pairs(pairs)), note
    )
