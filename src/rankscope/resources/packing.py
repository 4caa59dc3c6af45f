"""The allocator's plan: a packing simulation over a node model, pure (no Ray).

Bundles go node by node, preferred node type first (a label value, a custom resource or the
accelerator type), onto GPUs with at least `min_gpu_memory` GB free (unknown free memory is not
held against a GPU, and the reason says so); what does not fit takes the fallback: `cpu_backup`
(a CPU worker, said so), `wait` (left for `allocate()` to wait on) or `fail` (`AllocationError`
naming the shortfall per node).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rankscope.resources.analysis import EPS, shortfalls
from rankscope.resources.model import (
    AllocationError,
    AllocationPlan,
    BundlePlacement,
    ExcludedGpu,
    NodeResources,
    PlanError,
    Resources,
    Shortfall,
)

__all__ = ["FALLBACK_STRATEGIES", "node_types", "plan_placement", "validate_options"]

FALLBACK_STRATEGIES = ("cpu_backup", "wait", "fail")
_NOT_TYPES = ("CPU", "GPU", "memory", "object_store_memory")
_NOT_TYPE_LABELS = ("ray.io/node-id", "ray.io/market-type")


def validate_options(
    min_gpu_memory: float, preferred_node_type: str | None, fallback_strategy: str
) -> None:
    """Raise `PlanError` (one line, what is allowed) for options no cluster could make right."""
    if fallback_strategy not in FALLBACK_STRATEGIES:
        raise PlanError(
            f"unknown fallback_strategy {fallback_strategy!r}: use one of "
            + ", ".join(FALLBACK_STRATEGIES)
        )
    if not isinstance(min_gpu_memory, int | float) or math.isnan(min_gpu_memory):
        raise PlanError(f"min_gpu_memory ({min_gpu_memory!r}) must be a number of GB")
    if min_gpu_memory < 0:
        raise PlanError(f"min_gpu_memory ({min_gpu_memory:g} GB) must be 0 or more")
    if preferred_node_type is not None and not preferred_node_type.strip():
        raise PlanError("preferred_node_type is empty: give a node label value or resource name")


def node_types(node: NodeResources) -> set[str]:
    """The names a node answers to as a node type: its label values (not its id), its custom
    resources (not `node:<ip>` or a placement group's), its accelerator type."""
    types = {v for k, v in node.labels.items() if k not in _NOT_TYPE_LABELS and v}
    types |= {
        k
        for k in node.total
        if k not in _NOT_TYPES
        and not k.startswith(("node:", "accelerator_type:"))
        and "_group_" not in k
    }
    if node.accelerator_type:
        types.add(node.accelerator_type)
    return types


@dataclass
class _NodeState:
    node: NodeResources
    preferred: bool
    left: Resources
    gpu_left: dict[int, float]
    """Eligible GPU id -> fraction still free in the simulation."""


def plan_placement(
    bundles: Sequence[Resources],
    nodes: Sequence[NodeResources],
    *,
    min_gpu_memory: float = 0.0,
    preferred_node_type: str | None = None,
    fallback_strategy: str = "fail",
) -> AllocationPlan:
    """Where each bundle goes and why; `fail` raises `AllocationError` when some do not fit."""
    validate_options(min_gpu_memory, preferred_node_type, fallback_strategy)
    alive = [n for n in nodes if n.alive]
    if preferred_node_type is not None and not any(
        preferred_node_type in node_types(n) for n in alive
    ):
        known = sorted(set().union(*(node_types(n) for n in alive))) if alive else []
        raise PlanError(
            f"unknown node type {preferred_node_type!r}: the cluster's nodes offer "
            + (", ".join(known) if known else "no labels or custom resources")
        )
    for i, b in enumerate(bundles):
        if min(b.values(), default=0.0) < 0:
            bad = {k: v for k, v in b.items() if v < 0}
            raise PlanError(f"bundle {i} asks a negative amount: {bad}")
    excluded: list[ExcludedGpu] = []
    states = [_state(n, preferred_node_type, min_gpu_memory, excluded) for n in alive]
    states.sort(key=lambda s: (not s.preferred, -sum(s.gpu_left.values())))
    placements: list[BundlePlacement] = []
    short: list[Shortfall] = []
    lacking_of: dict[tuple[tuple[str, float], ...], list[Shortfall]] = {}
    cursor: dict[tuple[tuple[str, float], ...], int] = {}
    for i, bundle in enumerate(bundles):
        placed = _place(i, bundle, states, cursor, min_gpu_memory, preferred_node_type)
        if placed is None and bundle.get("GPU", 0.0) > EPS and fallback_strategy == "cpu_backup":
            cpu_only = {k: v for k, v in bundle.items() if k != "GPU"}
            placed = _place(i, cpu_only, states, cursor, min_gpu_memory, preferred_node_type)
            if placed is not None:
                placed = BundlePlacement(
                    i,
                    dict(bundle),
                    cpu_only,
                    placed.node_id,
                    placed.node_ip,
                    "CPU",
                    (),
                    f"no GPU{_mem(min_gpu_memory)} left on any node: a CPU worker on "
                    f"{placed.node_ip} ({(placed.node_id or '')[:8]}) instead (cpu_backup)",
                    fallback=True,
                )
        if placed is None:
            shape = tuple(sorted(bundle.items()))
            if shape not in lacking_of:  # what stays unplaced leaves the simulation as it was
                lacking_of[shape] = _lacking(bundle, states)
            lacking = lacking_of[shape]
            short.extend(lacking)
            worst = min(lacking, key=lambda s: s.missing, default=None)
            placed = BundlePlacement(
                i,
                dict(bundle),
                {},
                None,
                None,
                "none",
                (),
                f"does not fit: {worst}" if worst else "does not fit: no alive node",
                fallback=fallback_strategy == "wait",
            )
        placements.append(placed)
    plan = AllocationPlan(
        tuple(placements),
        fallback_strategy,
        preferred_node_type,
        float(min_gpu_memory),
        tuple(excluded),
        tuple(_dedupe(short)),
    )
    if fallback_strategy == "fail" and plan.unplaced:
        raise AllocationError(explain_shortfall(plan), plan)
    return plan


def explain_shortfall(plan: AllocationPlan) -> str:
    """One paragraph: how many bundles do not fit, and what each node lacks."""
    n = len(plan.unplaced)
    lines = [
        f"{n} of {len(plan.placements)} bundles do not fit"
        f"{' (fallback_strategy=' + repr(plan.fallback_strategy) + ')'}:"
    ]
    lines += [f"  {s}" for s in plan.shortfalls[:12]]
    lines += [f"  GPU {g.gpu_id} on {g.node_id[:8]}: {g.reason}" for g in plan.excluded_gpus[:6]]
    return "\n".join(lines)


def _state(
    node: NodeResources, preferred: str | None, min_gb: float, excluded: list[ExcludedGpu]
) -> _NodeState:
    n_gpus = int(node.total.get("GPU", 0.0) + EPS)
    eligible = []
    for gpu in range(n_gpus):
        free = node.gpu_free_gb[gpu] if gpu < len(node.gpu_free_gb) else None
        if free is not None and free + EPS < min_gb:
            excluded.append(
                ExcludedGpu(node.node_id, gpu, free, f"{free:.1f} GB free < {min_gb:g} GB")
            )
        else:
            eligible.append(gpu)
    # Ray says how much GPU is free, not which: the free fraction goes to the eligible GPUs.
    budget = min(node.available.get("GPU", 0.0), float(len(eligible)))
    gpu_left: dict[int, float] = {}
    for gpu in eligible:
        gpu_left[gpu] = min(1.0, budget)
        budget = max(0.0, budget - 1.0)
    return _NodeState(
        node,
        preferred is not None and preferred in node_types(node),
        dict(node.available),
        gpu_left,
    )


def _place(
    index: int,
    bundle: Resources,
    states: list[_NodeState],
    cursor: dict[tuple[tuple[str, float], ...], int],
    min_gb: float,
    preferred: str | None,
) -> BundlePlacement | None:
    shape = tuple(sorted(bundle.items()))
    gpus = bundle.get("GPU", 0.0)
    others = [(k, v) for k, v in shape if k != "GPU" and v > 0]
    # Resources only shrink: the nodes before the last one that fit this shape never will again.
    for at in range(cursor.get(shape, 0), len(states)):
        st = states[at]
        ids = _gpus_for(gpus, st.gpu_left) if gpus > EPS else ()
        if ids is None or any(st.left.get(k, 0.0) + EPS < v for k, v in others):
            continue
        cursor[shape] = at
        for k, v in bundle.items():
            st.left[k] = st.left.get(k, 0.0) - v
        share = gpus / len(ids) if ids else 0.0
        for g in ids:
            st.gpu_left[g] -= share
        return BundlePlacement(
            index,
            dict(bundle),
            dict(bundle),
            st.node.node_id,
            st.node.node_ip,
            "GPU" if ids else "CPU",
            ids,
            _reason(st, ids, gpus, min_gb, preferred),
        )
    cursor[shape] = len(states)
    return None


def _gpus_for(need: float, gpu_left: dict[int, float]) -> tuple[int, ...] | None:
    if need < 1.0 - EPS:  # a fraction: the fullest GPU it still fits on (best fit)
        fits = [g for g, left in gpu_left.items() if left + EPS >= need]
        return (min(fits, key=lambda g: (gpu_left[g], g)),) if fits else None
    whole = [g for g, left in gpu_left.items() if left >= 1.0 - EPS]
    count = math.ceil(need - EPS)
    return tuple(whole[:count]) if len(whole) >= count else None


def _reason(
    st: _NodeState, ids: tuple[int, ...], gpus: float, min_gb: float, pref: str | None
) -> str:
    node = st.node
    where = f"{node.node_ip} ({node.short_id})"
    kind = (
        f"preferred type {pref!r}"
        if st.preferred
        else (f"not of type {pref!r} (those are full)" if pref else "")
    )
    if not ids:
        text = f"on {where}: no GPU asked"
    else:
        mem = []
        for g in ids:
            free = node.gpu_free_gb[g] if g < len(node.gpu_free_gb) else None
            mem.append(f"{free:.1f} GB free" if free is not None else "free memory unknown")
        text = f"GPU {','.join(map(str, ids))} ({gpus:g}) on {where}: {', '.join(mem)}"
        if min_gb > 0:
            text += f" (min {min_gb:g} GB)"
    return f"{text}; {kind}" if kind else text


def _lacking(bundle: Resources, states: list[_NodeState]) -> list[Shortfall]:
    found = []
    for st in states:
        view = NodeResources(
            st.node.node_id,
            st.node.node_ip,
            st.node.total,
            {**st.left, "GPU": float(sum(1 for v in st.gpu_left.values() if v >= 1.0 - EPS))}
            if bundle.get("GPU", 0.0) >= 1.0 - EPS
            else {**st.left, "GPU": max(st.gpu_left.values(), default=0.0)},
        )
        found.extend(shortfalls(bundle, view, what="available"))
    return found


def _dedupe(short: list[Shortfall]) -> list[Shortfall]:
    seen: dict[tuple[str, str, float], Shortfall] = {}
    for s in short:
        seen.setdefault((s.node_id, s.resource, s.need), s)
    return sorted(seen.values(), key=lambda s: (s.node_ip, s.node_id, s.resource))


def _mem(min_gb: float) -> str:
    return f" with >= {min_gb:g} GB free" if min_gb > 0 else ""
