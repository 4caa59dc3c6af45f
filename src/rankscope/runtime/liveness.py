"""Is a silent probe's process still there? Asked on the probe's own node, through Ray.

Missed heartbeats alone cannot tell a dead process from a stuck one (GIL held, stopped,
swapping). The hub looks for a process on its own node itself; for other nodes' processes it
runs a zero-CPU task pinned to the probe's node (which may first have to start a worker). The
answer errs towards "still there": only a process (or node) proven gone makes a probe dead.
This is the one place the registry's rules meet Ray; `registry` decides what the answer means.
"""

from __future__ import annotations

import asyncio

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rankscope.runtime.protocol import ProbeInfo

__all__ = ["process_still_exists"]


def _process_exists(pid: int, create_time: float) -> bool:
    """On the probe's node: is that very process (not a reused pid) still there?"""
    import psutil

    try:
        return abs(psutil.Process(pid).create_time() - create_time) < 1.0
    except psutil.NoSuchProcess:
        return False


_process_exists_task = ray.remote(num_cpus=0)(_process_exists)


async def process_still_exists(info: ProbeInfo, timeout_s: float) -> bool:
    """Whether the probe's process exists; True when its node is too slow to say in time."""
    if info.context.node_id == ray.get_runtime_context().get_node_id():
        return _process_exists(info.context.pid, info.create_time)
    try:
        ref = _process_exists_task.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(info.context.node_id, soft=False)
        ).remote(info.context.pid, info.create_time)
        exists: bool = await asyncio.wait_for(ref, timeout=timeout_s)
    except asyncio.TimeoutError:
        exists = True  # the node is slow, not proven gone: keep looking
    except Exception:
        exists = False  # the node is gone or refuses work: so is the process
    return exists
