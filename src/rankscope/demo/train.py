"""The demo's training code: what a user's data-parallel worker looks like.

It never imports rankscope's runtime: the probe arrives through Ray's
`worker_process_setup_hook`; the only instrumentation is `rankscope.step(loss=..., tokens=...)`
once per step (the monitor's series: `rankscope top`, `monitor`, the report's loss chart).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

import rankscope
from rankscope.demo.gloo import GlooMember

STALL_SECONDS = 3600.0
BATCH = 64
"""Samples per step: with 16, a healthy rank's loss swung enough for the monitor's oscillation
detector (the loss it is given is the batch's, noise included)."""


class DemoWorker(GlooMember):
    """One data-parallel rank: a tiny MLP, SGD, gradients averaged with gloo all_reduce."""

    def __init__(self, rank: int, world_size: int, fault: str, fault_rank: int, fault_step: int):
        self.rank, self.world_size = rank, world_size
        self.fault, self.fault_rank, self.fault_step = fault, fault_rank, fault_step
        torch.manual_seed(0)
        torch.set_num_threads(1)
        self.model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)

    def train(self, steps: int) -> list[float]:
        inject = self._fault_hook()
        losses = []
        for step in range(steps):
            if inject is not None and step >= self.fault_step:
                inject(self, step)
            inputs, targets = load_batch(self, step)
            loss = train_step(self.model, self.optimizer, inputs, targets)
            losses.append(loss)
            rankscope.step(loss=loss, tokens=len(inputs))
        return losses

    def _fault_hook(self) -> Callable[[DemoWorker, int], None] | None:
        """The injected fault, on the faulty rank only (the demo's, not a user's, code)."""
        from rankscope.demo.faults import get_fault

        return get_fault(self.fault).inject if self.rank == self.fault_rank else None

    def leave(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    def check_consistency(self, operation_name: str) -> rankscope.ConsistencyReport:
        """Compare this rank's parameters and buffers with every other rank's (gloo group)."""
        return rankscope.verify_distributed_tensors(self.model, operation_name=operation_name)


def load_batch(worker: DemoWorker, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    if worker.fault == "stall" and worker.rank == worker.fault_rank and step == worker.fault_step:
        time.sleep(STALL_SECONDS)  # a stuck data loader: the other ranks wait in all_reduce
    generator = torch.Generator().manual_seed(step * 1000 + worker.rank)
    inputs = torch.randn(BATCH, 32, generator=generator)
    return inputs, inputs.sum(dim=1, keepdim=True) * 0.1


def train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, inputs: torch.Tensor, targets: torch.Tensor
) -> float:
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    world = dist.get_world_size()
    for param in model.parameters():
        assert param.grad is not None
        dist.all_reduce(param.grad)
        param.grad /= world
    optimizer.step()
    return loss.item()
