"""Who am I: rank, world, node, process and Ray ids of the calling process.

Sources, first match wins: explicit `rankscope.init(rank=..., world_size=...)`, torch.distributed
when it is initialized, the variables torchrun / Ray Train / verl set (RANK, LOCAL_RANK,
WORLD_SIZE, ...), else unknown (None). A rank is unique within its group, not within a Ray job
(verl runs several worker groups in one job, each with ranks 0..N-1), so the group is part of
who a process is: an explicit `rankscope.init(group=...)`, else the rendezvous address of its
default torch.distributed group, else MASTER_ADDR:MASTER_PORT. Node, process and Ray ids never
change within a process, so they are read once; only the rank sources are looked at again on
each call, which keeps `get_context()` cheap enough for every heartbeat.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import threading
from dataclasses import dataclass

__all__ = ["RankContext", "get_context", "set_explicit_rank"]


@dataclass(frozen=True)
class RankContext:
    """Identity of one process in a distributed job."""

    rank: int | None
    local_rank: int | None
    world_size: int | None
    node_id: str
    node_ip: str
    hostname: str
    pid: int
    job_id: str
    actor_id: str | None
    actor_class: str | None
    task_id: str | None
    rank_source: str
    """Where the rank came from: explicit, torch.distributed, env, or none."""
    group: str | None = None
    """The distributed group the rank belongs to (`host:port` of its rendezvous), or None."""

    @property
    def label(self) -> str:
        """Short human name: `rank 3` when known, else `pid 1234@host`."""
        if self.rank is not None:
            return f"rank {self.rank}"
        return f"pid {self.pid}@{self.hostname}"


@dataclass(frozen=True)
class _StaticIdentity:
    node_id: str
    node_ip: str
    hostname: str
    pid: int
    job_id: str
    actor_id: str | None
    actor_class: str | None


_explicit: dict[str, int | None] = {}
_explicit_group: list[str] = []
_static: _StaticIdentity | None = None
_static_lock = threading.Lock()


def set_explicit_rank(
    rank: int | None = None,
    world_size: int | None = None,
    local_rank: int | None = None,
    group: str | None = None,
) -> None:
    """Pin this process's rank (from `rankscope.init(rank=..., world_size=..., group=...)`)."""
    for key, value in (("rank", rank), ("world_size", world_size), ("local_rank", local_rank)):
        if value is not None:
            _explicit[key] = int(value)
    if group is not None:
        _explicit_group[:] = [str(group)]


def get_context() -> RankContext:
    """The calling process's identity; cheap enough to call on every heartbeat."""
    static = _static_identity()
    rank, local_rank, world_size, source = _rank_info()
    return RankContext(
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        task_id=_current_task_id(),
        rank_source=source,
        group=_group() if rank is not None else None,
        **dataclasses.asdict(static),
    )


def _group() -> str | None:
    """Where this rank's group met: the same string on every member, different per group."""
    if _explicit_group:
        return _explicit_group[0]
    dist = sys.modules.get("torch.distributed")
    if dist is not None:
        try:
            if dist.is_available() and dist.is_initialized():
                store = dist.distributed_c10d._get_default_store()
                while hasattr(store, "underlying_store"):  # PrefixStore around the real one
                    store = store.underlying_store
                if hasattr(store, "host") and hasattr(store, "port"):
                    return f"{store.host}:{store.port}"
        except Exception:  # a store we cannot read: fall back to the variables
            pass
    host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    return f"{host}:{port}" if host and port else None


def _rank_info() -> tuple[int | None, int | None, int | None, str]:
    env_local = _env_int("LOCAL_RANK")
    if "rank" in _explicit:
        return (
            _explicit["rank"],
            _explicit.get("local_rank", env_local),
            _explicit.get("world_size", _env_int("WORLD_SIZE")),
            "explicit",
        )
    dist = sys.modules.get("torch.distributed")  # never import torch just to ask
    if dist is not None:
        try:
            if dist.is_available() and dist.is_initialized():
                return dist.get_rank(), env_local, dist.get_world_size(), "torch.distributed"
        except Exception:  # a half-torn-down group must not break the probe
            pass
    rank = _env_int("RANK")
    if rank is not None:
        return rank, env_local, _env_int("WORLD_SIZE"), "env"
    return None, env_local, _env_int("WORLD_SIZE"), "none"


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def _static_identity() -> _StaticIdentity:
    global _static
    pid = os.getpid()
    if _static is not None and _static.pid == pid and _static.job_id and _static.actor_id:
        return _static
    with _static_lock:
        # Read again after a fork, once Ray is up if we were first asked before ray.init(),
        # and until an actor lives here (a setup hook runs before the actor is created).
        if _static is None or _static.pid != pid or not _static.job_id or not _static.actor_id:
            _static = _read_static_identity(pid)
        return _static


def _read_static_identity(pid: int) -> _StaticIdentity:
    hostname = socket.gethostname()
    node_id, node_ip, job_id = "", "", ""
    actor_id: str | None = None
    actor_class: str | None = None
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ctx = ray.get_runtime_context()
        node_id = ctx.get_node_id() or ""
        job_id = ctx.get_job_id() or ""
        actor_id = ctx.get_actor_id()
        actor_class = _actor_class_name(actor_id) if actor_id else None
        try:
            node_ip = ray.util.get_node_ip_address()
        except Exception:
            node_ip = ""
    return _StaticIdentity(node_id, node_ip, hostname, pid, job_id, actor_id, actor_class)


def _actor_class_name(actor_id: str) -> str | None:
    """The current actor's class, from the GCS actor table.

    Not from `get_runtime_context().current_actor`: asking for the handle while the actor is
    still being created can fail a fatal Ray check and kill the worker.
    """
    try:
        from ray._private import state

        name = state.actors(actor_id).get("ActorClassName")
        return str(name) if name else None
    except Exception:
        return None


def _current_task_id() -> str | None:
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    try:
        return ray.get_runtime_context().get_task_id()
    except Exception:
        return None


def reset_for_tests() -> None:
    """Forget explicit ranks and cached identity (Ray may have been initialized since)."""
    global _static
    _explicit.clear()
    _explicit_group.clear()
    _static = None
