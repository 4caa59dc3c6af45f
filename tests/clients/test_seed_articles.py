"""The seed articles' code, as written (with `from rankscope import ...` for the verl imports),
in a 2-rank Ray job whose actors have a rankscope context but no torch.distributed group."""

from __future__ import annotations

import os
from typing import Any

import ray

from helpers.cluster import wait_registered


class ArticleRank:
    def __init__(self, rank: int) -> None:
        import rankscope

        self.rank = rank
        rankscope.init(rank=rank, world_size=2)

    def pid(self) -> int:
        return os.getpid()

    def run_the_snippets(self, out_dir: str) -> dict[str, Any]:
        import torch

        from rankscope import (
            MemoryProfiler,
            conditional_breakpoint,
            inspect_distributed_tensor,
            profile_memory_usage,
            verify_distributed_tensors,
        )

        torch.manual_seed(0)  # the same weights on both ranks
        layers = [torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)]
        model = torch.nn.Sequential(*layers)
        data = torch.randn(8, 32)
        seen: dict[str, Any] = {}

        # Debugging is off in this job: the breakpoint returns at once on every rank.
        conditional_breakpoint(condition=lambda: True, rank_filter=lambda r: r == 0)

        report = verify_distributed_tensors(
            tensor_dict={n: p.detach() for n, p in model.named_parameters()},
            tolerance=1e-6,
            operation_name="gradient_sync",
        )
        seen["verify"] = report.summary

        profiler = MemoryProfiler(model=model, track_allocations=True, leak_detection=True)
        kept = []
        for step in range(40):
            kept.append(bytearray(4 << 20))  # a leak: 4 MiB a step, never freed
            snapshot = profiler.take_snapshot(step=step)
            if snapshot.leak_detected:
                seen["report"] = profiler.generate_report(
                    os.path.join(out_dir, f"memory_leak_analysis_{self.rank}.html")
                )
                break
        profiler.close()

        usage = profile_memory_usage(model, data)
        seen["usage"] = type(usage).__name__

        spread = inspect_distributed_tensor(model[0].weight.detach(), "fc1.weight")
        seen["spread"] = str(spread)
        return seen


def test_the_guides_snippets_run_as_written(cluster, tmp_path):
    actor = ray.remote(num_cpus=0)(ArticleRank)
    ranks = [actor.remote(r) for r in range(2)]
    try:
        wait_registered(ray.get([a.pid.remote() for a in ranks]), ranked=True)
        results = ray.get([a.run_the_snippets.remote(str(tmp_path)) for a in ranks], timeout=180)
    finally:
        for a in ranks:
            ray.kill(a)
    for rank, seen in enumerate(results):
        assert seen["verify"].startswith("gradient_sync: all 4 tensors consistent"), seen
        assert seen["report"].endswith(f"memory_leak_analysis_{rank}.html")
        assert os.path.getsize(seen["report"]) > 0
        assert seen["usage"] == "MemoryUsageProfile"
        assert "fc1.weight" in seen["spread"] and "replicated" in seen["spread"]
