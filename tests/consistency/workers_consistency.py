"""User code for the consistency tests: ranks that hold (almost) the same tensors.

`ConsistencyRank` is one rank of a real gloo group; `HubPeer` is an actor with no process
group at all (a rollout worker, say), compared through the rankscope hub. Each builds the
tensors of a named case, identical on every rank except where the case says otherwise.
"""

from __future__ import annotations

import os
from typing import Any

from rankscope.demo.gloo import GlooMember

PERTURBED_RANK = 2
NAN_RANK = 1
SHAPE_RANK = 3


def case_tensors(case: str, rank: int) -> Any:
    """The tensors one rank checks in a test case (same seed everywhere)."""
    import torch

    gen = torch.Generator().manual_seed(1234)
    w = torch.randn(64, 32, generator=gen)
    b = torch.randn(16, generator=gen)
    state: dict[str, Any] = {
        "layers.0.weight": w,
        "layers.0.bias": b,
        "optimizer": {"exp_avg": {"layers.0.weight": torch.randn(64, 32, generator=gen)}},
        "step": 7,
    }
    if case == "perturbed" and rank == PERTURBED_RANK:
        w[3, 4] += 1e-3
    elif case == "close" and rank == PERTURBED_RANK:
        w[3, 4] = torch.nextafter(w[3, 4], torch.tensor(float("inf")))  # one ulp
    elif case == "nan" and rank == NAN_RANK:
        w[0, 0] = float("nan")
    elif case == "shape" and rank == SHAPE_RANK:
        state["layers.0.bias"] = torch.randn(17, generator=gen)
    elif case == "missing" and rank == SHAPE_RANK:
        del state["layers.0.bias"]
    elif case.startswith("dtypes"):
        return dtype_tensors(perturb=case == "dtypes-perturbed" and rank == PERTURBED_RANK)
    return state


def dtype_tensors(perturb: bool) -> dict[str, Any]:
    import torch

    gen = torch.Generator().manual_seed(99)
    base = torch.randn(48, 40, generator=gen)
    tensors = {
        "bf16": base.bfloat16(),
        "fp16": base.half(),
        "int64": torch.arange(1000, dtype=torch.int64).reshape(10, 100),
        "bool": base > 0,
        "noncontig": base.t()[::2],
        "empty": torch.empty(0, 8),
        "scalar": torch.tensor(2.5),
        "fp64": base.double()[:, :7],
    }
    if perturb:
        tensors["bf16"][1, 1] += 0.5
        tensors["fp16"][2, 2] += 0.25
        tensors["int64"][0, 3] += 1
        tensors["bool"][4, 4] = ~tensors["bool"][4, 4]
        tensors["noncontig"][5, 5] += 1e-3
        tensors["scalar"] += 1.0
        tensors["fp64"][0, 0] += 1e-9
    return tensors


def module_with_grads(rank: int, grad_rank: int | None) -> Any:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.BatchNorm1d(4))
    model(torch.randn(5, 8)).sum().backward()
    if rank == grad_rank:
        with torch.no_grad():
            model[0].weight.grad[0, 0] += 0.1
    return model


class ConsistencyRank(GlooMember):
    """One rank of a gloo group."""

    join_timeout_s = 60.0

    def __init__(self, rank: int, world_size: int) -> None:
        import torch

        import rankscope

        torch.set_num_threads(1)
        self.rank, self.world_size = rank, world_size
        rankscope.init(rank=rank, world_size=world_size)

    def verify(self, case: str, **kwargs: Any) -> Any:
        import rankscope

        return rankscope.verify_distributed_tensors(case_tensors(case, self.rank), **kwargs)

    def verify_raising(self, case: str) -> str:
        import rankscope
        from rankscope.errors import ConsistencyError

        try:
            rankscope.verify_distributed_tensors(
                case_tensors(case, self.rank), operation_name="raising", raise_on_mismatch=True
            )
        except ConsistencyError as exc:
            return f"{type(exc).__name__}: {exc.report.summary}"
        return "no exception"

    def verify_bad_input_on(self, bad_rank: int) -> str:
        """One rank passes something that is not tensors; every rank must raise, none hang."""
        import rankscope
        from rankscope.errors import UserError

        tensors = 42 if self.rank == bad_rank else case_tensors("identical", self.rank)
        try:
            rankscope.verify_distributed_tensors(tensors, operation_name="bad_input")
        except UserError as exc:
            return str(exc)
        return "no exception"

    def verify_module(self, include_grads: bool, grad_rank: int | None) -> Any:
        import rankscope

        model = module_with_grads(self.rank, grad_rank)
        return rankscope.verify_distributed_tensors(
            model, operation_name="module", include_grads=include_grads
        )

    def inspect(self, sharded: bool) -> Any:
        import torch

        import rankscope

        full = torch.arange(41, dtype=torch.float32)
        tensor = full[self.rank * 10 : (self.rank + 1) * 10 + (self.rank == 3)] if sharded else full
        return rankscope.inspect_distributed_tensor(tensor, "embed.weight")

    def pid(self) -> int:
        return os.getpid()


class HubPeer:
    """An actor that shares no process group with the others (e.g. a rollout worker)."""

    def __init__(self, rank: int) -> None:
        import torch

        import rankscope

        torch.set_num_threads(1)
        self.rank = rank
        rankscope.init(rank=rank)

    def verify(self, case: str, ranks: list[int], deadline_s: float) -> Any:
        import rankscope

        return rankscope.verify_distributed_tensors(
            case_tensors(case, self.rank),
            operation_name=f"weight_sync/{case}",
            ranks=ranks,
            deadline_s=deadline_s,
        )

    def inspect(self, ranks: list[int]) -> Any:
        import torch

        import rankscope

        return rankscope.inspect_distributed_tensor(
            torch.ones(3) * self.rank, "policy.bias", ranks=ranks, deadline_s=30
        )
