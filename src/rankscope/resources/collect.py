"""The CLI side: the live cluster's nodes (GCS) and its pending and running work (state API).

Nodes, their totals, labels and free resources come from the GCS (no dashboard needed, so the
allocator plans on any cluster); pending tasks, actors and placement groups and what holds the
resources come from Ray's state API, which needs the dashboard (`why-pending` says so in one
line when it is off). GPU free memory comes from a node task (`nvidia-smi`) when asked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rankscope.errors import UserError
from rankscope.resources.analysis import explain_pending
from rankscope.resources.model import Demand, DemandKind, Holder, NodeResources, PendingReport

__all__ = [
    "NoStateApiError",
    "cluster_nodes",
    "gpu_memory_by_node",
    "pending_report",
    "read_demands",
]

STATE_TIMEOUT_S = 10
LIMIT = 10_000
PENDING_TASK_STATES = (
    "PENDING_NODE_ASSIGNMENT",
    "PENDING_ARGS_AVAIL",
    "PENDING_ARGS_FETCH",
    "PENDING_OBJ_STORE_MEM_AVAIL",
)
PENDING_ACTOR_STATES = frozenset({"PENDING_CREATION", "DEPENDENCIES_UNREADY"})
NODE_TASK_TIMEOUT_S = 15.0
GIB = 1024**3


class NoStateApiError(UserError):
    """Ray's state API does not answer: the cluster runs without its dashboard."""


def cluster_nodes() -> list[NodeResources]:
    """Every node of the connected cluster: totals, labels, free resources (GCS only)."""
    import ray
    from ray._private import state

    available = state.available_resources_per_node()
    nodes = []
    for n in ray.nodes():
        node_id = n["NodeID"]
        nodes.append(
            NodeResources(
                node_id=node_id,
                node_ip=n.get("NodeManagerAddress", ""),
                total={k: float(v) for k, v in (n.get("Resources") or {}).items()},
                available={k: float(v) for k, v in available.get(node_id, {}).items()},
                labels={str(k): str(v) for k, v in (n.get("Labels") or {}).items()},
                alive=bool(n.get("Alive")),
                is_head="node:__internal_head__" in (n.get("Resources") or {}),
            )
        )
    return nodes


def read_demands(*, timeout: int = STATE_TIMEOUT_S) -> tuple[list[Demand], list[Holder]]:
    """Pending tasks, actors and placement groups, and who holds resources now (state API)."""
    from ray.util import state

    def tasks(st: str) -> Callable[[], list[Any]]:
        return lambda: state.list_tasks(
            filters=[("state", "=", st)],
            limit=LIMIT,
            detail=True,
            timeout=timeout,
            raise_on_missing_output=False,
        )

    calls: dict[str, Callable[[], list[Any]]] = {
        **{s: tasks(s) for s in (*PENDING_TASK_STATES, "RUNNING")},
        "actors": lambda: state.list_actors(
            limit=LIMIT, detail=True, timeout=timeout, raise_on_missing_output=False
        ),
        "groups": lambda: state.list_placement_groups(
            limit=LIMIT, detail=True, timeout=timeout, raise_on_missing_output=False
        ),
    }
    try:
        with ThreadPoolExecutor(len(calls)) as pool:
            futures = {k: pool.submit(fn) for k, fn in calls.items()}
            got = {k: f.result() for k, f in futures.items()}
    except Exception as exc:  # the state API lives in the dashboard
        if "dashboard" in str(exc).lower() or "connect" in str(exc).lower():
            raise NoStateApiError(
                "Ray's state API does not answer (the cluster runs without its dashboard): "
                "start it with `ray start --head --include-dashboard=true` "
                "(or ray.init(include_dashboard=True))"
            ) from None
        raise
    demands: list[Demand] = []
    holders: list[Holder] = []
    for s in PENDING_TASK_STATES:
        demands += [_task_demand(t) for t in got[s] if _is_plain_task(t)]
    holders += [
        _holder("task", t.task_id, t.name, t.node_id, t)
        for t in got["RUNNING"]
        if _is_plain_task(t) and t.node_id
    ]
    for a in got["actors"]:
        if a.state in PENDING_ACTOR_STATES:
            demands.append(_actor_demand(a))
        elif a.state == "ALIVE" and a.node_id:
            holders.append(_holder("actor", a.actor_id, a.class_name, a.node_id, a))
    strategies = _group_strategies() if got["groups"] else {}
    for g in got["groups"]:
        if g.state in ("PENDING", "RESCHEDULING"):
            demands.append(_group_demand(g, strategies.get(g.placement_group_id, "")))
        elif g.state == "CREATED":
            for i, b in enumerate(g.bundles or []):
                if b.get("node_id"):
                    holders.append(
                        Holder(
                            "placement group",
                            g.placement_group_id,
                            f"{g.name or g.placement_group_id[:12]} bundle {i}",
                            b["node_id"],
                            _floats(b.get("unit_resources")),
                        )
                    )
    return demands, holders


def pending_report(address: str | None) -> PendingReport:
    """Connect, read nodes and demands, explain every pending demand."""
    from rankscope.runtime.client import connect

    connect(address)
    demands, holders = read_demands()
    return explain_pending(demands, cluster_nodes(), holders)


def gpu_memory_by_node(
    nodes: Sequence[NodeResources], *, timeout_s: float = NODE_TASK_TIMEOUT_S
) -> dict[str, tuple[tuple[float | None, ...], tuple[float | None, ...]]]:
    """Free and total GB of each GPU, by node id, measured by a task on each GPU node.

    `nvidia-smi` is asked in the order of the node's CUDA_VISIBLE_DEVICES (Ray's GPU ids index
    it); nodes without it, or whose task does not answer in time, are left out (unknown).
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from rankscope.memory.gpus import query_nvidia_smi

    remote = ray.remote(num_cpus=0)(query_nvidia_smi)
    refs = {
        n.node_id: remote.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(n.node_id, soft=False)
        ).remote()
        for n in nodes
        if n.alive and n.total.get("GPU", 0.0) > 0
    }
    out: dict[str, tuple[tuple[float | None, ...], tuple[float | None, ...]]] = {}
    if not refs:  # no GPU node: nothing to measure
        return out
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    done = set(ready)
    for node_id, ref in refs.items():
        if ref in done:
            try:
                devices = ray.get(ref)
            except Exception:
                continue
            if devices:
                out[node_id] = (
                    tuple((d.total - d.used) / GIB for d in devices),
                    tuple(d.total / GIB for d in devices),
                )
        else:
            ray.cancel(ref, force=True)
    return out


def _is_plain_task(t: Any) -> bool:
    # actor creation tasks are reported as actors; actor method calls use the actor's resources
    return t.type not in ("ACTOR_CREATION_TASK", "ACTOR_TASK", "DRIVER_TASK")


def _floats(res: Any) -> dict[str, float]:
    return {str(k): float(v) for k, v in (res or {}).items()}


def _task_demand(t: Any) -> Demand:
    return Demand(
        DemandKind.TASK,
        t.task_id,
        t.name or t.func_or_class_name or "",
        t.state,
        (_floats(t.required_resources),),
        label_selector=dict(t.label_selector or {}),
        placement_group_id=t.placement_group_id or "",
        job_id=t.job_id or "",
    )


def _actor_demand(a: Any) -> Demand:
    return Demand(
        DemandKind.ACTOR,
        a.actor_id,
        a.class_name or "",
        a.state,
        (_floats(a.required_resources),),
        label_selector=dict(a.label_selector or {}),
        placement_group_id=a.placement_group_id or "",
        job_id=a.job_id or "",
    )


def _group_strategies() -> dict[str, str]:
    """Each placement group's strategy, from the GCS (the state API's record leaves it out)."""
    import ray

    try:
        table = ray.util.placement_group_table()
    except Exception:
        return {}
    return {str(pg_id): str(g.get("strategy") or "") for pg_id, g in table.items()}


def _group_demand(g: Any, strategy: str) -> Demand:
    bundles = tuple(_floats(b.get("unit_resources")) for b in g.bundles or [])
    selectors: dict[str, str] = {}
    for b in g.bundles or []:
        selectors.update(b.get("label_selector") or {})
    return Demand(
        DemandKind.PLACEMENT_GROUP,
        g.placement_group_id,
        g.name or "",
        g.state,
        bundles,
        strategy=strategy,
        label_selector=selectors,
        job_id=g.creator_job_id or "",
    )


def _holder(kind: str, id_: str, name: str | None, node_id: str, rec: Any) -> Holder:
    return Holder(kind, id_, name or "", node_id, _floats(rec.required_resources))
