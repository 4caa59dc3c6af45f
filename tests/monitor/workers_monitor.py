"""A monitored data-parallel rank: the demo's model and batches, with the faults the monitor
tests inject (a slow rank, a late collective, a NaN, a loss spike, fewer tokens)."""

from __future__ import annotations

import math
import os
import time

import torch
import torch.distributed as dist
from torch import nn

import rankscope
from rankscope.demo.gloo import GlooMember
from rankscope.demo.train import DemoWorker, load_batch


class MonitoredRank(GlooMember):
    join_timeout_s = 120.0

    def __init__(self, rank: int, world_size: int, **faults: float) -> None:
        # a group of its own: earlier tests' ranks in the session's job are scored too
        rankscope.init(rank=rank, world_size=world_size, group="monitored")
        self.rank, self.world_size = rank, world_size
        self.faults = faults
        torch.manual_seed(0)
        torch.set_num_threads(1)
        self.model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)
        self.watch = rankscope.watch_nan(self.model, self.optimizer)
        self._batch = DemoWorker.__new__(DemoWorker)
        self._batch.rank, self._batch.fault = rank, "none"

    def pid(self) -> int:
        return os.getpid()

    def alert_to(self, url: str) -> None:
        rankscope.configure_alerts(webhook=url)

    def train(self, steps: int) -> int:
        f = self.faults
        for step in range(1, steps + 1):
            with rankscope.span("load_batch"):  # the phases, when a trace window records
                time.sleep(f.get("sleep_s", 0.0))  # a slow rank: slow in data loading
                inputs, targets = load_batch(self._batch, step)  # type: ignore[arg-type]
            if step == f.get("nan_step"):  # the first Linear's output turns non-finite
                inputs = inputs.clone()
                inputs[0, 0] = float("inf")
            self.optimizer.zero_grad()
            with rankscope.span("forward"):
                loss = nn.functional.mse_loss(self.model(inputs), targets)
            with rankscope.span("backward"):
                loss.backward()
            if step == f.get("late_step"):
                time.sleep(f.get("late_s", 0.0))
            for p in self.model.parameters():
                assert p.grad is not None
                dist.all_reduce(p.grad)
                p.grad /= self.world_size
            grads = [p.grad for p in self.model.parameters() if p.grad is not None]
            norm = float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])))
            if math.isfinite(norm):  # skip the update, as AMP's GradScaler does
                self.optimizer.step()
            value = float(loss) * (10.0 if step == f.get("spike_step") else 1.0)
            tokens = 512 if step < f.get("fewer_tokens_from", 10**9) else 358
            rankscope.step(loss=value, tokens=tokens, grad_norm=norm)
        return step
