"""Ray tasks and actor method calls of the job, from Ray's task events (the state API).

Pure: `collect.read_ray_tasks` asks the state API; here `ray_task(state)` turns one `TaskState`
into a `RayTask`, and the rest says which worker ran it, how long it waited to be scheduled
(submitted -> running), which tasks have been pending longer than a threshold, and how much of
a worker's window went by between its tasks (idle).
Task times come from the GCS, on the head node's clock, where the hub runs: no offset applies.
"""

from __future__ import annotations

from typing import Any

from rankscope.context import RankContext
from rankscope.runtime.protocol import ProbeInfo, ProbeState, ProbeStatus, Progress
from rankscope.trace.model import RankTrace, RayTask

__all__ = [
    "attach_tasks",
    "idle_share",
    "pending_too_long",
    "ray_task",
    "untraced_workers",
]

RUNNING = "RUNNING"
PENDING_PREFIX = ("PENDING", "SUBMITTED")
DONE = ("FINISHED", "FAILED")
MAX_TASKS = 10_000


def ray_task(state: Any) -> RayTask | None:
    """A `ray.util.state` TaskState (or its dict) as a `RayTask`; None without a creation time."""

    def get(key: str, default: Any = None) -> Any:
        if isinstance(state, dict):
            return state.get(key, default)
        return getattr(state, key, default)

    events = get("events") or []
    first: dict[str, int] = {}
    for event in events:
        name, at = event.get("state"), event.get("created_ms")
        if name and at is not None and name not in first:
            first[name] = int(at * 1e6)
    submitted = first.get("PENDING_ARGS_AVAIL") or first.get("PENDING_NODE_ASSIGNMENT")
    submitted = submitted or _ns(get("creation_time_ms"))
    if submitted is None:
        return None
    running = first.get(RUNNING) or _ns(get("start_time_ms"))
    end = first.get("FINISHED") or first.get("FAILED") or _ns(get("end_time_ms"))
    return RayTask(
        task_id=str(get("task_id", "")),
        name=str(get("name") or get("func_or_class_name") or "task"),
        kind=str(get("type", "")),
        state=str(get("state", "")),
        node_id=str(get("node_id") or ""),
        worker_pid=get("worker_pid"),
        submitted_ns=submitted,
        running_ns=running,
        end_ns=end,
        parent_task_id=str(get("parent_task_id") or ""),
        error=str(get("error_type") or ""),
    )


def attach_tasks(
    traces: list[RankTrace], tasks: list[RayTask], window: tuple[int, int]
) -> list[RayTask]:
    """Give each trace the tasks its process ran within `window` (hub clock); returns the
    window's tasks that ran in processes outside the traces (workers with no probe)."""
    by_process = {(t.status.context.node_id, t.status.context.pid): t for t in traces}
    outside = []
    for task in tasks:
        if task.running_ns is None or task.running_ns > window[1]:
            continue
        if task.end_ns is not None and task.end_ns < window[0]:
            continue
        trace = by_process.get((task.node_id, task.worker_pid or -1))
        if trace is None:
            outside.append(task)
        else:
            trace.tasks.append(task)
    return outside


def untraced_workers(
    tasks: list[RayTask], job_id: str, node_ips: dict[str, str], window: tuple[int, int]
) -> list[RankTrace]:
    """A trace per worker process that ran some of `tasks` without a probe (no setup hook, no
    `rankscope.init`), holding only its tasks: every task of the window gets a track, on its
    node, named by its worker's pid."""
    by_worker: dict[tuple[str, int], list[RayTask]] = {}
    for task in tasks:
        by_worker.setdefault((task.node_id, task.worker_pid or 0), []).append(task)
    traces = []
    for (node_id, pid), ran in sorted(by_worker.items()):
        ip = node_ips.get(node_id, node_id[:8])
        context = RankContext(
            rank=None, local_rank=None, world_size=None, node_id=node_id, node_ip=ip,
            hostname=ip, pid=pid, job_id=job_id, actor_id=None, actor_class="untraced worker",
            task_id=None, rank_source="none",
        )  # fmt: skip
        info = ProbeInfo(f"ray-worker-{node_id[:8]}-{pid}", context, "", 0.0)
        status = ProbeStatus(info, ProbeState.ALIVE, 0.0, 0.0, Progress(0, 0.0), 0, 0)
        traces.append(
            RankTrace(status=status, tasks=ran, started_ns=window[0], stopped_ns=window[1])
        )
    return traces


def _ns(ms: Any) -> int | None:
    return None if not ms else int(ms * 1e6)


def pending_too_long(tasks: list[RayTask], now_ns: int, threshold_s: float) -> list[RayTask]:
    """Tasks not yet running that were submitted more than `threshold_s` ago."""
    limit = int(threshold_s * 1e9)
    return [
        t
        for t in tasks
        if t.running_ns is None and t.state not in DONE and now_ns - t.submitted_ns > limit
    ]


def idle_share(tasks: list[RayTask], window: tuple[int, int]) -> float:
    """Share of `window` in which the worker ran none of `tasks` (actor creation excluded)."""
    start, end = window
    spans = sorted(
        (max(start, t.running_ns), min(end, t.end_ns or end))
        for t in tasks
        if t.running_ns is not None and t.kind != "ACTOR_CREATION_TASK"
    )
    busy, reach = 0, start
    for s, e in spans:
        s = max(s, reach)
        if e > s:
            busy += e - s
            reach = e
    return max(0.0, 1.0 - busy / max(1, end - start))
