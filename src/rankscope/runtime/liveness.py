"""Is a silent probe's process still there? Asked on the probe's own node, through Ray.

Missed heartbeats alone cannot tell a dead process from a stuck one (GIL held, stopped,
swapping), and the hub cannot see other nodes' processes, so it runs a zero-CPU task pinned to
the probe's node. The answer errs towards "still there": only a process (or node) proven gone
makes a probe dead. This is the one place the registry's rules meet Ray; `registry` decides
what the answer means.
"""

from __future__ import annotations

import asyncio

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rankscope.runtime.protocol import ProbeInfo

__all__ = ["process_still_exists"]


@ray.remote(num_cpus=0)
def _process_exists(pid: int, create_time: float) -> bool:
    """Runs on the probe's node: is that very process (not a reused pid) still there?"""
    import psutil

    try:
        return abs(psutil.Process(pid).create_time() - create_time) < 1.0
    except psutil.NoSuchProcess:
        return False


async def process_still_exists(info: ProbeInfo, timeout_s: float) -> bool:
    """Whether the probe's process exists; True when its node is too slow to say in time."""
    try:
        ref = _process_exists.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(info.context.node_id, soft=False)
        ).remote(info.context.pid, info.create_time)
        exists: bool = await asyncio.wait_for(ref, timeout=timeout_s)
    except asyncio.TimeoutError:
        exists = True  # the node is slow, not proven gone: keep looking
    except Exception:
        exists = False  # the node is gone or refuses work: so is the process
    return exists
