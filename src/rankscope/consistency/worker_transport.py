"""How fingerprints travel: the caller's torch.distributed group, or the rankscope hub.

With a process group, every rank of the group takes part and the exchange is a collective
(`all_gather_object` on a gloo group: the default group when it is gloo, a gloo side group
when it is NCCL). Processes that share no group (a trainer and its rollout workers) meet at
the hub instead: `ranks` names who takes part, and an exchange returns when all have arrived
or when the deadline passes, naming who did not come.
"""

from __future__ import annotations

import pickle
import zlib
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from rankscope.consistency.model import DiffPlan
from rankscope.errors import UserError


@dataclass(frozen=True)
class Gathered:
    payloads: dict[int, Any]
    missing: tuple[int, ...] = ()


class Transport(Protocol):
    name: str
    rank: int

    def gather(self, payload: Any) -> Gathered:
        """Every participant's payload (this rank's included), by rank."""
        ...

    def share(
        self, plans: list[DiffPlan], local: dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """Send each plan's reference copy to its outliers; what this rank received, by name."""
        ...


def encode(value: Any) -> bytes:
    """Small records on the wire: pickled, then compressed (names repeat a lot)."""
    return zlib.compress(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), 1)


def decode(data: bytes) -> Any:
    return pickle.loads(zlib.decompress(data))


# ------------------------------------------------------------------------ torch.distributed
_SIDE_GROUPS: dict[int, Any] = {}


class TorchTransport:
    """A torch.distributed group (the default one when `group` is None)."""

    name = "torch.distributed"

    def __init__(self, group: Any = None) -> None:
        import torch.distributed as dist

        self._dist = dist
        self.group = group
        self.backend = str(dist.get_backend(group))
        self.ranks = list(dist.get_process_group_ranks(group or dist.group.WORLD))
        self.rank = dist.get_rank()
        if self.rank not in self.ranks:
            raise UserError(f"rank {self.rank} is not a member of the group it passed")
        self.object_group = group
        if self.backend == "nccl" and group is None:
            self.object_group = _gloo_side_group()
            self.name = "torch.distributed (NCCL; gloo side group for fingerprints)"
        else:
            self.name = f"torch.distributed ({self.backend})"

    def gather(self, payload: Any) -> Gathered:
        out: list[Any] = [None] * len(self.ranks)
        self._dist.all_gather_object(out, payload, group=self.object_group)
        return Gathered(dict(zip(self.ranks, out, strict=True)))

    def share(
        self, plans: list[DiffPlan], local: dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        received: dict[str, torch.Tensor] = {}
        for plan in plans:  # the same plans in the same order on every rank: a collective each
            mine = local.get(plan.name)
            group, device = self._broadcast_route(plan.on_device)  # the same on every rank
            if self.rank == plan.reference and mine is not None:
                buf = _raw_bytes(mine).to(device)
            else:
                buf = torch.empty(plan.nbytes, dtype=torch.uint8, device=device)
            self._dist.broadcast(buf, src=plan.reference, group=group)
            if self.rank in plan.outliers and mine is not None:
                received[plan.name] = buf.view(mine.dtype).view(mine.shape).to(mine.device)
        return received

    def _broadcast_route(self, on_device: bool) -> tuple[Any, torch.device]:
        """Tensors on a GPU on every rank go over NCCL where they are; the rest over gloo."""
        if self.backend == "nccl" and on_device:
            return self.group, torch.device("cuda", torch.cuda.current_device())
        if str(self._dist.get_backend(self.object_group)) == "gloo":
            return self.object_group, torch.device("cpu")
        return self.group, torch.device("cuda", torch.cuda.current_device())


def _gloo_side_group() -> Any:
    """A gloo group over the whole world, made once (a collective call on first use)."""
    import torch.distributed as dist

    key = id(dist.group.WORLD)
    if key not in _SIDE_GROUPS:
        _SIDE_GROUPS[key] = dist.new_group(backend="gloo")
    return _SIDE_GROUPS[key]


def _raw_bytes(t: torch.Tensor) -> torch.Tensor:
    flat = t.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8) if flat.dtype != torch.uint8 else flat


# ------------------------------------------------------------------------------------- hub
class HubTransport:
    """A rendezvous at the rankscope hub among the processes named by `ranks`."""

    name = "rankscope hub"

    def __init__(self, ranks: list[int], rank: int, key: str, deadline_s: float) -> None:
        if rank not in ranks:
            raise UserError(f"this process is rank {rank}, which is not in ranks={sorted(ranks)}")
        self.rank = rank
        self.expected = sorted(set(ranks))
        self.key = key
        self.deadline_s = deadline_s
        self._round = 0

    def gather(self, payload: Any) -> Gathered:
        from rankscope.runtime.rendezvous import exchange

        self._round += 1
        result = exchange(
            f"{self.key}/{self._round}",
            self.rank,
            payload,
            self.expected,
            deadline_s=self.deadline_s,
        )
        self.expected = sorted(result.payloads)  # later rounds wait only for who came
        return Gathered(dict(result.payloads), tuple(result.missing))

    def share(
        self, plans: list[DiffPlan], local: dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        outgoing = {
            p.name: _raw_bytes(local[p.name]).cpu()
            for p in plans
            if p.reference == self.rank and p.name in local
        }
        got = self.gather(outgoing).payloads
        received: dict[str, torch.Tensor] = {}
        for plan in plans:
            mine = local.get(plan.name)
            raw = got.get(plan.reference, {}).get(plan.name)
            if self.rank in plan.outliers and mine is not None and raw is not None:
                received[plan.name] = raw.to(mine.device).view(mine.dtype).view(mine.shape)
        return received
