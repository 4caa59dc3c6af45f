"""Records of the resources feature: nodes, demands, holders, verdicts, placements.

Plain dataclasses with no Ray in them, so the pure analysis reads them and `--json` prints them.
Resource amounts are Ray's units (`CPU`, `GPU`, custom resources); GPU memory is in GB (10**9
bytes would be odd for a GPU: GiB, as `nvidia-smi` counts).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from rankscope.errors import UserError

__all__ = [
    "AllocationError",
    "AllocationPlan",
    "AllocationTimeout",
    "BundlePlacement",
    "Demand",
    "DemandKind",
    "ExcludedGpu",
    "Holder",
    "NodeResources",
    "PendingReport",
    "PendingVerdict",
    "PlanError",
    "Shortfall",
    "Verdict",
]

Resources = dict[str, float]


class PlanError(UserError):
    """Bad allocator input: an unknown strategy, a negative memory, an unknown node type."""


class AllocationError(UserError):
    """`fallback_strategy="fail"` and the bundles do not fit: the message names the shortfall."""

    def __init__(self, message: str, plan: AllocationPlan | None = None) -> None:
        super().__init__(message)
        self.plan = plan


class AllocationTimeout(AllocationError):
    """The placement group was not ready within the timeout: the message says why (why-pending)."""


@dataclass(frozen=True)
class NodeResources:
    """One Ray node as the scheduler sees it (and what we know of its GPUs)."""

    node_id: str
    node_ip: str
    total: Resources
    available: Resources
    labels: dict[str, str] = field(default_factory=dict)
    alive: bool = True
    is_head: bool = False
    gpu_free_gb: tuple[float | None, ...] = ()
    """Free memory of each GPU by Ray GPU id (index), when a probe or a node task measured it."""
    gpu_total_gb: tuple[float | None, ...] = ()

    @property
    def short_id(self) -> str:
        return self.node_id[:8]

    @property
    def accelerator_type(self) -> str | None:
        """Ray's `accelerator_type:<T>` resource or its `ray.io/accelerator-type` label."""
        for key in self.total:
            if key.startswith("accelerator_type:"):
                return key.split(":", 1)[1]
        return self.labels.get("ray.io/accelerator-type")

    @property
    def name(self) -> str:
        return f"{self.node_ip} ({self.short_id})"


class DemandKind(str, enum.Enum):
    TASK = "task"
    ACTOR = "actor"
    PLACEMENT_GROUP = "placement_group"


@dataclass(frozen=True)
class Demand:
    """Something pending: a task, an actor or a placement group, with what it asks for."""

    kind: DemandKind
    id: str
    name: str
    state: str
    """Ray's own state name (PENDING_NODE_ASSIGNMENT, PENDING_CREATION, PENDING, ...)."""
    bundles: tuple[Resources, ...]
    """One bundle for a task or an actor; a placement group's bundles."""
    strategy: str = ""
    """A placement group's PACK / SPREAD / STRICT_PACK / STRICT_SPREAD."""
    label_selector: dict[str, str] = field(default_factory=dict)
    placement_group_id: str = ""
    """The group a task or actor is scheduled into (it waits for that group)."""
    job_id: str = ""


@dataclass(frozen=True)
class Holder:
    """What holds resources on a node now: an actor, a running task, a placement group bundle."""

    kind: str
    id: str
    name: str
    node_id: str
    resources: Resources
    job_id: str = ""
    """The job it belongs to: why-pending names another job's holder as that job's."""


@dataclass(frozen=True)
class Shortfall:
    """`resource` on `node`: the demand needs `need`, the node has `have` (total or free)."""

    node_id: str
    node_ip: str
    resource: str
    need: float
    have: float
    what: str = "total"
    """`total` (can never fit: infeasible) or `available` (free now: waiting)."""

    @property
    def missing(self) -> float:
        return max(0.0, self.need - self.have)

    def __str__(self) -> str:
        return (
            f"{self.resource} on {self.node_ip} ({self.node_id[:8]}): needs {self.need:g}, "
            f"{'has' if self.what == 'total' else 'free'} {self.have:g} "
            f"(short by {self.missing:g})"
        )


class Verdict(str, enum.Enum):
    """Why a demand is pending."""

    INFEASIBLE = "infeasible"
    """No node could ever fit it (totals, labels, or a strategy no node set satisfies)."""
    WAITING = "waiting"
    """It would fit, but the resources are held now; the holders are named."""
    PENDING_ARGS = "pending_args"
    """Waiting for its arguments (objects other tasks still produce or transfer)."""
    PENDING_OBJECT_STORE = "pending_object_store"
    """Waiting for object store memory on its node."""
    PENDING_GROUP = "pending_group"
    """Waits for its placement group: being created or committed (start-up), or created and
    its bundles not yet in the nodes' resources; never infeasible while the group exists."""
    SCHEDULABLE = "schedulable"
    """Fits in what is free now: the scheduler has not placed it yet (transient)."""


@dataclass(frozen=True)
class PendingVerdict:
    demand: Demand
    verdict: Verdict
    reason: str
    """One line a user reads."""
    shortfalls: tuple[Shortfall, ...] = ()
    holders: tuple[Holder, ...] = ()


@dataclass(frozen=True)
class PendingReport:
    """`rankscope why-pending`: every pending demand's verdict against every node."""

    nodes: tuple[NodeResources, ...]
    verdicts: tuple[PendingVerdict, ...]
    notes: tuple[str, ...] = ()
    """What the read left out, one line each (no dashboard: tasks)."""

    @property
    def infeasible(self) -> tuple[PendingVerdict, ...]:
        return tuple(v for v in self.verdicts if v.verdict == Verdict.INFEASIBLE)


@dataclass(frozen=True)
class ExcludedGpu:
    node_id: str
    gpu_id: int
    free_gb: float
    reason: str


@dataclass(frozen=True)
class BundlePlacement:
    """Where the plan puts one bundle, and why."""

    index: int
    request: Resources
    """What was asked."""
    resources: Resources
    """What the placement takes (a CPU fallback drops the GPU)."""
    node_id: str | None
    node_ip: str | None
    device: str
    """`GPU`, `CPU` (a cpu_backup worker, or a bundle without GPUs) or `none` (unplaced)."""
    gpu_ids: tuple[int, ...]
    reason: str
    fallback: bool = False

    @property
    def placed(self) -> bool:
        return self.node_id is not None


@dataclass(frozen=True)
class AllocationPlan:
    placements: tuple[BundlePlacement, ...]
    fallback_strategy: str
    preferred_node_type: str | None
    min_gpu_memory: float
    excluded_gpus: tuple[ExcludedGpu, ...] = ()
    shortfalls: tuple[Shortfall, ...] = ()
    """For unplaced bundles: what each node lacks (of its free resources)."""

    @property
    def unplaced(self) -> tuple[BundlePlacement, ...]:
        return tuple(p for p in self.placements if not p.placed)

    @property
    def on_gpu(self) -> tuple[BundlePlacement, ...]:
        return tuple(p for p in self.placements if p.device == "GPU")

    @property
    def on_cpu_backup(self) -> tuple[BundlePlacement, ...]:
        return tuple(p for p in self.placements if p.fallback and p.placed)
