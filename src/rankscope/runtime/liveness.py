"""Is a silent probe's process still there? Asked on the probe's own node, through Ray.

Missed heartbeats alone cannot tell a dead process from a stuck one (GIL held, stopped,
swapping). The hub looks for a process on its own node itself; for other nodes' processes it
runs a zero-CPU task pinned to the probe's node (which may first have to start a worker), one
for all of that node's silent probes. The answer errs towards "still there": only a process
(or node) proven gone makes a probe dead.
This is the one place the registry's rules meet Ray; `registry` decides what the answer means.

Ray's own verdict on nodes comes from the GCS's node table (`dead_nodes`): a worker can outlive
its raylet (SIGKILL-ed) and keep heartbeating over the connection it has, while Ray has declared
its node dead after missed health checks; the hub reads the table every `NODE_SWEEP_S` so that
rankscope says what Ray says.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rankscope.runtime.protocol import ProbeInfo

__all__ = ["NODE_SWEEP_S", "dead_nodes", "dead_nodes_of", "processes_still_exist"]

NODE_SWEEP_S = 3.0
"""How often the hub reads Ray's node table (one GCS call of a millisecond or two, in a
thread): a node Ray declared dead is known to rankscope within this of Ray's own verdict."""

_NODE_DEATHS = {
    1: "removed",
    2: "its raylet ended unexpectedly",
    3: "preempted",
    4: "drained as idle",
}
"""Ray's NodeDeathInfo.Reason codes, for a death Ray gave no message for."""


def dead_nodes() -> dict[str, str]:
    """Node id -> why Ray declared that node dead. Blocks on one GCS call: run it in a thread."""
    return dead_nodes_of(ray.nodes())


def dead_nodes_of(table: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The dead nodes of a `ray.nodes()` table, each with one line on why (pure)."""
    out = {}
    for node in table:
        node_id = str(node.get("NodeID") or "")
        if not node_id or node.get("Alive", True):
            continue
        where = node.get("NodeManagerAddress") or node_id[:12]
        why = str(node.get("DeathReasonMessage") or "").strip()
        why = why or _NODE_DEATHS.get(int(node.get("DeathReason") or 0), "")
        out[node_id] = f"Ray declared node {where} dead" + (f" ({why})" if why else "")
    return out


def _process_exists(pid: int, create_time: float) -> bool:
    """On the probe's node: is that very process (not a reused pid) still there, and not a
    zombie (killed, not yet reaped by its raylet)?"""
    import psutil

    try:
        process = psutil.Process(pid)
        same = abs(process.create_time() - create_time) < 1.0
        return same and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _processes_exist(processes: list[tuple[int, float]]) -> list[bool]:
    """`_process_exists` for each (pid, create_time) of one node."""
    return [_process_exists(pid, create_time) for pid, create_time in processes]


_processes_exist_task = ray.remote(num_cpus=0)(_processes_exist)


async def processes_still_exist(
    node_id: str, infos: Sequence[ProbeInfo], timeout_s: float
) -> list[bool]:
    """Whether each of one node's probes' processes exists, all asked in one task on that node
    (each task may start a Ray worker process there, the more so on a node under load: the
    hub's task workers above Ray's soft limit end after a second idle); True for all when the
    node is too slow to say in time."""
    processes = [(info.context.pid, info.create_time) for info in infos]
    if node_id == ray.get_runtime_context().get_node_id():
        return _processes_exist(processes)
    try:
        ref = _processes_exist_task.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
        ).remote(processes)
        exists: list[bool] = await asyncio.wait_for(ref, timeout=timeout_s)
    except asyncio.TimeoutError:
        exists = [True] * len(infos)  # the node is slow, not proven gone: keep looking
    except Exception:
        exists = [False] * len(infos)  # the node is gone or refuses work: so are the processes
    return exists
