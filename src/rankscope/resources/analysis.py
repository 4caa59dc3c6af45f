"""Why is it pending: every pending demand against every node's totals and free resources.

Pure functions over `model` records, no Ray: `explain_pending` is what `rankscope why-pending`
and `SmartResourceAllocator.allocate()`'s timeout print. A demand no node could ever fit
(totals, labels, a strategy) is infeasible with the shortfall per node; one that would fit but
finds the resources held is waiting, with the holders on the nodes it could use. Work in a
placement group that exists (being created or committed, or just created and not yet in the
nodes' resources) waits for its group: start-up is not a failure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from rankscope.resources.model import (
    Demand,
    DemandKind,
    Holder,
    NodeResources,
    PendingReport,
    PendingVerdict,
    Resources,
    Shortfall,
    Verdict,
)

__all__ = [
    "base_resource",
    "explain_pending",
    "group_of",
    "labels_match",
    "pack_bundles",
    "shortfalls",
]

EPS = 1e-9
ARGS_STATES = frozenset({"PENDING_ARGS_AVAIL", "PENDING_ARGS_FETCH", "DEPENDENCIES_UNREADY"})
OBJECT_STORE_STATES = frozenset({"PENDING_OBJ_STORE_MEM_AVAIL"})
CREATING_GROUP_STATES = {
    "PENDING": "being created",
    "PREPARED": "being committed",
    "RESCHEDULING": "being rescheduled",
}
"""Ray's states of a placement group on its way to CREATED, and what each means."""


def base_resource(name: str) -> str:
    """`GPU` for a placement group's `GPU_group_0_<id>` / `GPU_group_<id>`; else the name."""
    return name.split("_group_", 1)[0] if "_group_" in name else name


def shortfalls(bundle: Resources, node: NodeResources, *, what: str = "total") -> list[Shortfall]:
    """What `node` lacks for `bundle`, of its total (`what="total"`) or free resources."""
    have_of = node.total if what == "total" else node.available
    return [
        Shortfall(node.node_id, node.node_ip, res, need, have_of.get(res, 0.0), what)
        for res, need in sorted(bundle.items())
        if need > EPS and have_of.get(res, 0.0) + EPS < need
    ]


def labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    """Ray's label selector: `value`, `!value`, `in(a,b)`, `!in(a,b)` per key."""
    for key, want in selector.items():
        have = labels.get(key)
        negate = want.startswith("!")
        spec = want[1:] if negate else want
        if spec.startswith("in(") and spec.endswith(")"):
            ok = have in {v.strip() for v in spec[3:-1].split(",")}
        else:
            ok = have == spec
        if ok == negate:
            return False
    return True


def pack_bundles(
    bundles: Sequence[Resources], capacities: Sequence[Resources], strategy: str
) -> list[int] | None:
    """A node index per bundle under Ray's placement `strategy`, or None when none exists.

    STRICT_PACK needs one node for the sum; STRICT_SPREAD a distinct node per bundle; PACK and
    SPREAD any nodes (first fit, largest bundles first). Greedy, so a rare fit may be missed.
    """
    if not capacities:
        return None
    if strategy == "STRICT_PACK":
        total = _sum(bundles)
        for i, cap in enumerate(capacities):
            if _fits(total, cap):
                return [i] * len(bundles)
        return None
    left = [dict(c) for c in capacities]
    order = sorted(range(len(bundles)), key=lambda b: -sum(bundles[b].values()))
    placed: dict[int, int] = {}
    used: set[int] = set()
    for b in order:
        for i, cap in enumerate(left):
            if strategy == "STRICT_SPREAD" and i in used:
                continue
            if _fits(bundles[b], cap):
                for res, need in bundles[b].items():
                    cap[res] = cap.get(res, 0.0) - need
                placed[b] = i
                used.add(i)
                break
        else:
            return None
    return [placed[b] for b in range(len(bundles))]


def group_of(resource: str) -> str:
    """The placement group id a bundle resource names (`CPU_group_<id>`, `GPU_group_0_<id>`,
    `bundle_group_<id>`), else ""."""
    return resource.split("_group_", 1)[1].rsplit("_", 1)[-1] if "_group_" in resource else ""


def explain_pending(
    demands: Iterable[Demand],
    nodes: Sequence[NodeResources],
    holders: Sequence[Holder],
    groups: Mapping[str, str] | None = None,
) -> PendingReport:
    """Every demand's verdict; infeasible ones first, then waiting, then the rest.

    `groups`: every placement group that exists, id -> Ray's state (PENDING, PREPARED,
    CREATED, RESCHEDULING); the groups among `demands` and `holders` count too. Work in a
    group that exists is never infeasible: it waits for its group (start-up, not a failure).
    """
    alive = [n for n in nodes if n.alive]
    demands = list(demands)
    pending_groups = {
        d.id for d in demands if d.kind == DemandKind.PLACEMENT_GROUP and d.state == "PENDING"
    }
    known = {h.id: "CREATED" for h in holders if h.kind == "placement group"}
    known.update({d.id: d.state for d in demands if d.kind == DemandKind.PLACEMENT_GROUP})
    known.update(groups or {})
    verdicts = [
        _in_group(d, alive, known) or _explain(d, alive, holders, pending_groups) for d in demands
    ]
    order = list(Verdict)
    verdicts.sort(key=lambda v: (order.index(v.verdict), v.demand.kind.value, v.demand.id))
    return PendingReport(tuple(nodes), tuple(verdicts))


def _in_group(
    demand: Demand, nodes: Sequence[NodeResources], groups: Mapping[str, str]
) -> PendingVerdict | None:
    """A task or actor waiting for its placement group (being created or committed, or its
    bundles not yet in the nodes' resources); None when that is not why it waits."""
    if (
        demand.kind == DemandKind.PLACEMENT_GROUP
        or demand.state in ARGS_STATES | OBJECT_STORE_STATES
    ):
        return None
    named = {group_of(r) for b in demand.bundles for r in b} - {""}
    pg = next((g for g in (demand.placement_group_id, *sorted(named)) if g and g in groups), "")
    if not pg:
        return None
    state, what, short = groups[pg], _describe(demand), pg[:12]
    if state in CREATING_GROUP_STATES:
        doing = CREATING_GROUP_STATES[state]
        return PendingVerdict(
            demand,
            Verdict.PENDING_GROUP,
            f"{what}: waits for its placement group {short}, which is {doing} ({state}"
            + ("; see its line)" if state in ("PENDING", "RESCHEDULING") else ")"),
        )
    fits = pack_bundles(demand.bundles, [n.total for n in nodes], demand.strategy or "PACK")
    if fits is None:  # the group exists: its bundles are not (yet) in the nodes' resources
        return PendingVerdict(
            demand,
            Verdict.PENDING_GROUP,
            f"{what}: waits for its placement group {short} ({state}): its bundles are not "
            "in the nodes' resources yet (Ray commits them after the group is created)",
        )
    return None


def _explain(
    demand: Demand,
    nodes: Sequence[NodeResources],
    holders: Sequence[Holder],
    pending_groups: set[str],
) -> PendingVerdict:
    if demand.state in ARGS_STATES:
        return PendingVerdict(
            demand,
            Verdict.PENDING_ARGS,
            "waiting for its arguments: objects that other tasks still compute or transfer",
        )
    if demand.state in OBJECT_STORE_STATES:
        return PendingVerdict(
            demand,
            Verdict.PENDING_OBJECT_STORE,
            "waiting for object store memory on its node to pull its arguments",
        )
    if demand.placement_group_id and demand.placement_group_id in pending_groups:
        return PendingVerdict(
            demand,
            Verdict.PENDING_GROUP,
            f"scheduled into placement group {demand.placement_group_id[:12]}, "
            "which is itself pending (see its line)",
        )
    candidates = [n for n in nodes if labels_match(demand.label_selector, n.labels)]
    what = _describe(demand)
    if not candidates:
        return PendingVerdict(
            demand,
            Verdict.INFEASIBLE,
            f"{what}: no alive node has the labels {_selector(demand.label_selector)}",
        )
    strategy = demand.strategy or "PACK"
    if pack_bundles(demand.bundles, [n.total for n in candidates], strategy) is None:
        short = _why_not(demand, candidates, "total")
        return PendingVerdict(
            demand,
            Verdict.INFEASIBLE,
            f"{what}: no node could ever fit it"
            + (
                f" ({_strategy_note(strategy)})"
                if demand.kind == DemandKind.PLACEMENT_GROUP
                else ""
            )
            + (f"; closest: {_closest(short)}" if short else ""),
            tuple(short),
        )
    if pack_bundles(demand.bundles, [n.available for n in candidates], strategy) is not None:
        return PendingVerdict(
            demand,
            Verdict.SCHEDULABLE,
            f"{what}: fits in what is free now; the scheduler has not placed it yet",
        )
    could = [n for n in candidates if _could_host(demand, n)]
    short = _why_not(demand, could, "available")
    short_res = {s.resource for s in short}
    held = _holders_of(holders, {n.node_id for n in could}, short_res)
    names = ", ".join(
        f"{h.kind} {h.name}{_of_job(h, demand)} ({_amounts(h.resources, short_res)})"
        for h in held[:4]
    )
    return PendingVerdict(
        demand,
        Verdict.WAITING,
        f"{what}: would fit, but {', '.join(sorted(short_res)) or 'the resources'} "
        f"{'is' if len(short_res) == 1 else 'are'} held"
        + (f" by {names}" + (f" and {len(held) - 4} more" if len(held) > 4 else "") if held else "")
        + (f"; {_closest(short)}" if short else ""),
        tuple(short),
        tuple(held),
    )


def _could_host(demand: Demand, node: NodeResources) -> bool:
    """Whether `node` could host some bundle of the demand (the whole sum for STRICT_PACK)."""
    if demand.strategy == "STRICT_PACK":
        return not shortfalls(_sum(demand.bundles), node)
    return any(not shortfalls(b, node) for b in demand.bundles)


def _why_not(demand: Demand, nodes: Sequence[NodeResources], what: str) -> list[Shortfall]:
    """Per node, what it lacks for the demand: the sum (STRICT_PACK) or the largest bundle."""
    if not demand.bundles:
        return []
    if demand.strategy == "STRICT_PACK":
        need = _sum(demand.bundles)
    else:
        need = max(demand.bundles, key=lambda b: sum(b.values()))
    found: list[Shortfall] = []
    for n in nodes:
        found.extend(shortfalls(need, n, what=what))
    if not found and demand.strategy in ("STRICT_SPREAD", "PACK", "SPREAD", ""):
        # each bundle fits some node, all of them together do not: the sum against the cluster
        need = _sum(demand.bundles)
        for res, amount in sorted(need.items()):
            have = sum((n.total if what == "total" else n.available).get(res, 0.0) for n in nodes)
            if have + EPS < amount:
                found.append(Shortfall("cluster", "all nodes", res, amount, have, what))
    found.sort(key=lambda s: (s.missing, s.node_ip))
    return found


def _holders_of(holders: Sequence[Holder], node_ids: set[str], resources: set[str]) -> list[Holder]:
    def amount(h: Holder) -> float:
        return sum(v for k, v in h.resources.items() if base_resource(k) in resources)

    found = [h for h in holders if h.node_id in node_ids and amount(h) > EPS]
    found.sort(key=lambda h: (-amount(h), h.kind, h.name))
    return found


def _of_job(holder: Holder, demand: Demand) -> str:
    """` of job <id>` when another job holds it (the user's own job goes unsaid)."""
    return f" of job {holder.job_id}" if holder.job_id and holder.job_id != demand.job_id else ""


def _amounts(resources: Resources, names: set[str]) -> str:
    parts: dict[str, float] = {}
    for k, v in resources.items():
        if base_resource(k) in names:
            parts[base_resource(k)] = parts.get(base_resource(k), 0.0) + v
    return ", ".join(f"{k} {v:g}" for k, v in sorted(parts.items()))


def _closest(short: Sequence[Shortfall]) -> str:
    by_node: dict[str, list[Shortfall]] = {}
    for s in short:
        by_node.setdefault(s.node_id, []).append(s)
    best = min(by_node.values(), key=lambda ss: (len(ss), sum(s.missing for s in ss)))
    more = len(by_node) - 1
    return "; ".join(str(s) for s in best) + (f" (and {more} other nodes short)" if more else "")


def _describe(demand: Demand) -> str:
    if demand.kind == DemandKind.PLACEMENT_GROUP:
        bundles = ", ".join(_res(b) for b in demand.bundles[:4])
        extra = f" +{len(demand.bundles) - 4}" if len(demand.bundles) > 4 else ""
        return f"{demand.strategy or 'PACK'} group of [{bundles}{extra}]"
    return f"asks {_res(demand.bundles[0]) if demand.bundles else 'nothing'}"


def _res(bundle: Resources) -> str:
    return "{" + ", ".join(f"{base_resource(k)}: {v:g}" for k, v in sorted(bundle.items())) + "}"


def _selector(selector: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(selector.items()))


def _strategy_note(strategy: str) -> str:
    return {
        "STRICT_PACK": "STRICT_PACK: all bundles on one node",
        "STRICT_SPREAD": "STRICT_SPREAD: each bundle on its own node",
    }.get(strategy, strategy)


def _fits(need: Resources, cap: Resources) -> bool:
    return all(v <= EPS or cap.get(k, 0.0) + EPS >= v for k, v in need.items())


def _sum(bundles: Iterable[Resources]) -> Resources:
    total: Resources = {}
    for b in bundles:
        for k, v in b.items():
            total[k] = total.get(k, 0.0) + v
    return total
