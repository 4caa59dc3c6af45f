"""The CLI side: the live cluster's nodes (GCS) and its pending and running work (state API).

Nodes, their totals, labels and free resources come from the GCS (no dashboard needed, so the
allocator plans on any cluster); pending tasks, actors and placement groups and what holds the
resources come from Ray's state API, which needs the dashboard. Without it (the demo's cluster,
many CI clusters), actors and placement groups are read from the GCS's own tables instead and
tasks are left out, which the report says in one line. GPU free memory comes from a node task
(`nvidia-smi`) when asked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from rankscope.errors import UserError
from rankscope.resources.analysis import explain_pending
from rankscope.resources.model import Demand, DemandKind, Holder, NodeResources, PendingReport

__all__ = [
    "DemandsRead",
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
NO_DASHBOARD_NOTE = (
    "read from Ray's GCS (the cluster runs without its dashboard): actors and placement groups "
    "only, pending and running tasks left out; start the head with --include-dashboard=true "
    "to see them"
)


class NoStateApiError(UserError):
    """Ray's state API does not answer: the cluster runs without its dashboard."""


@dataclass(frozen=True)
class DemandsRead:
    """What waits, what holds resources now, and what the read left out (one line, or "")."""

    demands: list[Demand]
    holders: list[Holder]
    note: str = ""
    groups: dict[str, str] = field(default_factory=dict)
    """Every placement group that exists, id -> Ray's state: work in one waits for it."""


@dataclass(frozen=True)
class _ActorRecord:
    """An actor from the GCS's table, named as the state API's `ActorState` names its fields
    (ids in hex), so one conversion serves both sources."""

    actor_id: str
    class_name: str
    state: str
    required_resources: dict[str, float]
    label_selector: dict[str, str]
    placement_group_id: str
    job_id: str
    node_id: str


@dataclass(frozen=True)
class _GroupRecord:
    """A placement group from the GCS's table, named as the state API's `PlacementGroupState`
    names its fields; `bundles` as it lists them (`unit_resources`, `node_id`, `label_selector`)."""

    placement_group_id: str
    name: str
    state: str
    strategy: str
    creator_job_id: str
    bundles: list[dict[str, Any]] = field(default_factory=list)


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


def read_demands(*, timeout: int = STATE_TIMEOUT_S, state_api: bool = True) -> DemandsRead:
    """Pending tasks, actors and placement groups, and who holds resources now (state API);
    without the dashboard (or `state_api=False`: known absent, not asked), actors and groups
    from the GCS and a note that tasks are left out."""
    if not state_api:
        return _read_from_gcs()
    try:
        got = _ask_state_api(timeout)
    except Exception as exc:  # the state API lives in the dashboard
        if "dashboard" in str(exc).lower() or "connect" in str(exc).lower():
            return _read_from_gcs()
        raise
    strategies = _group_strategies() if got["groups"] else {}
    demands, holders = _from_records(got["actors"], got["groups"], strategies)
    for s in PENDING_TASK_STATES:
        demands += [_task_demand(t) for t in got[s] if _is_plain_task(t)]
    holders += [
        _holder("task", t.task_id, t.name, t.node_id, t)
        for t in got["RUNNING"]
        if _is_plain_task(t) and t.node_id
    ]
    return DemandsRead(demands, holders, groups=_group_states(got["groups"]))


def pending_report(address: str | None, *, state_api: bool = True) -> PendingReport:
    """Connect, read nodes and demands, explain every pending demand (`read_demands`)."""
    from rankscope.runtime.client import connect

    connect(address)
    read = read_demands(state_api=state_api)
    report = explain_pending(read.demands, cluster_nodes(), read.holders, read.groups)
    return replace(report, notes=(read.note,)) if read.note else report


def _ask_state_api(timeout: int) -> dict[str, list[Any]]:
    """Every list the report needs from the state API, asked at once: by name. Of the cluster
    this process is connected to: left to itself, the state API looks for "the" cluster
    (RAY_ADDRESS, or the newest one started on this machine), which may be another one."""
    import ray
    from ray.util import state

    address = ray.get_runtime_context().gcs_address

    def tasks(st: str) -> Callable[[], list[Any]]:
        return lambda: state.list_tasks(
            address=address,
            filters=[("state", "=", st)],
            limit=LIMIT,
            detail=True,
            timeout=timeout,
            raise_on_missing_output=False,
        )

    calls: dict[str, Callable[[], list[Any]]] = {
        **{s: tasks(s) for s in (*PENDING_TASK_STATES, "RUNNING")},
        "actors": lambda: state.list_actors(
            address=address,
            limit=LIMIT,
            detail=True,
            timeout=timeout,
            raise_on_missing_output=False,
        ),
        "groups": lambda: state.list_placement_groups(
            address=address,
            limit=LIMIT,
            detail=True,
            timeout=timeout,
            raise_on_missing_output=False,
        ),
    }
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = {k: pool.submit(fn) for k, fn in calls.items()}
        return {k: f.result() for k, f in futures.items()}


def _read_from_gcs() -> DemandsRead:
    """No dashboard: actors and placement groups from the GCS, or the one clear line."""
    try:
        actors, groups = _gcs_records()
    except Exception:
        raise NoStateApiError(
            "Ray's state API does not answer (the cluster runs without its dashboard): "
            "start it with `ray start --head --include-dashboard=true` "
            "(or ray.init(include_dashboard=True))"
        ) from None
    strategies = {g.placement_group_id: g.strategy for g in groups}
    demands, holders = _from_records(actors, groups, strategies)
    return DemandsRead(demands, holders, NO_DASHBOARD_NOTE, _group_states(groups))


def _gcs_records() -> tuple[list[_ActorRecord], list[_GroupRecord]]:
    """The GCS's actor table (pending and alive) and placement group table, as records.

    Why Ray's private API: the public state API (`ray.util.state`) is served by the dashboard,
    and a cluster started without it answers none of it; the GCS still keeps both tables, which
    `ray._private.state`'s accessor returns as serialized `gcs_pb2` records (Ray 2.60's names:
    `ActorTableData`, `PlacementGroupTableData`). Ray's tasks are not in the GCS (their events
    also go through the dashboard), so they are left out. Any change of these names in a later
    Ray fails here, and the caller says the state API does not answer, as before.
    """
    from ray._private.state import state
    from ray.core.generated import common_pb2, gcs_pb2

    gcs: Any = gcs_pb2  # generated protobuf classes: no stubs for mypy
    common: Any = common_pb2
    accessor = state._connect_and_get_accessor()
    actor_states = gcs.ActorTableData.ActorState
    actors = []
    for wanted in (*sorted(PENDING_ACTOR_STATES), "ALIVE"):
        for raw in accessor.get_actor_table(None, wanted):
            a = gcs.ActorTableData.FromString(raw)
            actors.append(
                _ActorRecord(
                    actor_id=a.actor_id.hex(),
                    class_name=a.class_name,
                    state=actor_states.Name(a.state),
                    required_resources=dict(a.required_resources),
                    label_selector=dict(a.label_selector),
                    placement_group_id=a.placement_group_id.hex(),
                    job_id=a.job_id.hex(),
                    node_id=a.node_id.hex(),
                )
            )
    group_states = gcs.PlacementGroupTableData.PlacementGroupState
    groups = []
    for raw in accessor.get_placement_group_table():
        g = gcs.PlacementGroupTableData.FromString(raw)
        bundles = [
            {
                "unit_resources": dict(b.unit_resources),
                "node_id": b.node_id.hex(),
                "label_selector": dict(b.label_selector),
            }
            for b in sorted(g.bundles, key=lambda b: b.bundle_id.bundle_index)
        ]
        groups.append(
            _GroupRecord(
                placement_group_id=g.placement_group_id.hex(),
                name=g.name,
                state=group_states.Name(g.state),
                strategy=common.PlacementStrategy.Name(g.strategy),
                creator_job_id=g.creator_job_id.hex(),
                bundles=bundles,
            )
        )
    return actors, groups


def _from_records(
    actors: Sequence[Any], groups: Sequence[Any], strategies: dict[str, str]
) -> tuple[list[Demand], list[Holder]]:
    """Demands and holders from actor and placement group records (state API or GCS)."""
    demands: list[Demand] = []
    holders: list[Holder] = []
    for a in actors:
        if a.state in PENDING_ACTOR_STATES:
            demands.append(_actor_demand(a))
        elif a.state == "ALIVE" and a.node_id:
            holders.append(_holder("actor", a.actor_id, a.class_name, a.node_id, a))
    for g in groups:
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
                            g.creator_job_id or "",
                        )
                    )
    return demands, holders


def gpu_memory_by_node(
    nodes: Sequence[NodeResources], *, timeout_s: float = NODE_TASK_TIMEOUT_S
) -> dict[str, tuple[tuple[float | None, ...], tuple[float | None, ...]]]:
    """Free and total GB of each GPU, by node id, measured by a task on each GPU node.

    `nvidia-smi` is asked in the order of the node's CUDA_VISIBLE_DEVICES (Ray's GPU ids index
    it); nodes without it, or whose task does not answer in time, are left out (unknown).
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from rankscope.memory.worker_gpus import query_nvidia_smi

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
    job = getattr(rec, "job_id", "") or ""
    return Holder(kind, id_, name or "", node_id, _floats(rec.required_resources), job)


def _group_states(groups: Sequence[Any]) -> dict[str, str]:
    """Every placement group that exists (not removed), id -> Ray's state."""
    return {g.placement_group_id: g.state for g in groups if g.state != "REMOVED"}
