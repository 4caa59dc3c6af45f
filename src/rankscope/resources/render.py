"""Rich text for `why-pending` and `plan`, from the same records `--json` prints."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from rankscope.resources.analysis import base_resource
from rankscope.resources.model import AllocationPlan, PendingReport, Resources, Verdict

__all__ = ["render_pending", "render_plan"]

_STYLE = {
    Verdict.INFEASIBLE: "bold red",
    Verdict.WAITING: "yellow",
    Verdict.PENDING_ARGS: "cyan",
    Verdict.PENDING_OBJECT_STORE: "cyan",
    Verdict.PENDING_GROUP: "dim",
    Verdict.SCHEDULABLE: "green",
}
_SHOWN = ("CPU", "GPU", "memory", "object_store_memory")


def render_pending(report: PendingReport) -> RenderableType:
    """The nodes (total / free), then one line per pending demand with its verdict."""
    nodes = Table(title="nodes (free / total)", title_justify="left")
    custom = sorted({k for n in report.nodes for k in n.total if k not in _SHOWN and _custom(k)})
    for c in ("node", "labels", "CPU", "GPU", *custom):
        nodes.add_column(c, justify="left" if c in ("node", "labels") else "right")
    for n in report.nodes:
        labels = ", ".join(f"{k}={v}" for k, v in sorted(n.labels.items()) if k != "ray.io/node-id")
        nodes.add_row(
            n.name + ("" if n.alive else " (dead)"),
            labels or "-",
            *(_free_of(n.available, n.total, r) for r in ("CPU", "GPU", *custom)),
        )
    parts: list[RenderableType] = [nodes]
    parts += [Text(f"note: {note}", style="dim") for note in report.notes]
    if not report.verdicts:
        parts.append(Text("nothing is pending", style="green"))
        return Group(*parts)
    parts.append(Text(f"{len(report.verdicts)} pending", style="bold"))
    for v in report.verdicts:
        d = v.demand
        line = Text()
        line.append(f"{v.verdict.value:<12}", style=_STYLE[v.verdict])
        line.append(f" {d.kind.value} {_short(d.name) or '-'} ({d.id[:12]})")
        parts.append(line)
        parts.append(Text(f"    {v.reason}"))
    if report.infeasible:
        parts.append(
            Text(
                f"{len(report.infeasible)} can never be scheduled on this cluster as it is: "
                "ask for less, or add a node that has it",
                style="bold red",
            )
        )
    return Group(*parts)


def render_plan(plan: AllocationPlan) -> RenderableType:
    table = Table(
        title=f"plan: {len(plan.on_gpu)} on GPUs, {len(plan.on_cpu_backup)} CPU fallbacks, "
        f"{len(plan.unplaced)} unplaced (fallback {plan.fallback_strategy})",
        title_justify="left",
    )
    for c in ("bundle", "asks", "node", "device", "why"):
        table.add_column(c, overflow="fold")
    for p in plan.placements:
        table.add_row(
            str(p.index),
            _res(p.request),
            p.node_ip or "-",
            Text(p.device, style="yellow" if p.fallback else ("red" if not p.placed else "")),
            p.reason,
        )
    parts: list[RenderableType] = [table]
    for g in plan.excluded_gpus:
        parts.append(Text(f"excluded: GPU {g.gpu_id} on {g.node_id[:8]}: {g.reason}", style="dim"))
    return Group(*parts)


def _short(name: str) -> str:
    """`Worker` for `main.<locals>.Worker` (a class defined inside a function)."""
    return name.rsplit("<locals>.", 1)[-1]


def _custom(key: str) -> bool:
    return not key.startswith(("node:", "accelerator_type:")) and "_group_" not in key


def _free_of(available: Resources, total: Resources, key: str) -> str:
    if key not in total:
        return "-"
    return f"{available.get(key, 0.0):g} / {total[key]:g}"


def _res(bundle: Resources) -> str:
    return ", ".join(f"{base_resource(k)} {v:g}" for k, v in sorted(bundle.items())) or "-"
