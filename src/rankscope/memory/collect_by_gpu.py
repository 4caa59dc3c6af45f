"""`rankscope memory --by-gpu`: ask every probe which GPUs it uses, group by physical GPU.

The CLI side of the view (`analysis/gpus.py` is the pure grouping, `gpus.py` the probe's
`gpus` command); the rendering is `render_by_gpu` below, from the same records `--json` prints.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from rankscope.context import RankContext
from rankscope.memory.analysis.gpus import GpuProcess, GpuShare, group_by_gpu
from rankscope.memory.model import GpuTenancy
from rankscope.runtime import deadlines
from rankscope.runtime.ask import Answers, Command, Selection, ask_one, select
from rankscope.runtime.client import HubClient
from rankscope.units import human_bytes

__all__ = ["JobGpus", "collect_by_gpu", "render_by_gpu"]


@dataclass(frozen=True)
class JobGpus:
    job_id: str
    gpus: list[GpuShare]
    without_gpu: list[str]
    """Processes that use no GPU (no Ray GPU id, no CUDA_VISIBLE_DEVICES)."""
    unanswered: list[str]

    @property
    def has_findings(self) -> bool:
        return any(g.findings for g in self.gpus) or bool(self.unanswered)


def collect_by_gpu(
    address: str | None, selection: Selection, *, client: HubClient | None = None
) -> list[JobGpus]:
    """Each job's processes by physical GPU; `client` reuses a caller's attached hub."""
    client = client or HubClient.attach(address)
    tenancy = Command("gpus", expect=GpuTenancy)
    return [
        _job(job_id, ask_one(client, probes, tenancy, deadlines.GPUS_S))
        for job_id, probes in select(client, selection).items()
    ]


def _job(job_id: str, answers: Answers) -> JobGpus:
    processes = [_gpu_process(p.context, reply.payload) for p, reply in answers.answered]
    unanswered = [f"{p.context.label}: {why}" for p, why in answers.unanswered(silent="no answer")]
    gpus = group_by_gpu(processes)
    on_gpu = {t.pid for g in gpus for t in g.tenants}
    without = [p.label for p in processes if p.pid not in on_gpu]
    return JobGpus(job_id, gpus, without, unanswered)


def _gpu_process(ctx: RankContext, tenancy: GpuTenancy) -> GpuProcess:
    return GpuProcess(
        ctx.label,
        ctx.node_id,
        ctx.node_ip or ctx.hostname,
        ctx.pid,
        tenancy,
        ctx.rank,
        ctx.group,
        ctx.actor_class,
    )


def render_by_gpu(view: JobGpus) -> RenderableType:
    """One table per job: each GPU, its co-tenants and their memory, the sum against the total."""
    table = Table(
        title=f"job {view.job_id}: {len(view.gpus)} GPUs in use (flagged first)",
        title_justify="left",
    )
    for c in ("GPU", "process", "actor", "Ray share", "memory", "via"):
        table.add_column(c, justify="right" if c in ("Ray share", "memory") else "left")
    for g in view.gpus:
        table.add_section()
        for i, t in enumerate(g.tenants):
            table.add_row(
                g.name if i == 0 else "",
                t.label,
                t.actor_class or "-",
                f"{t.ray_share:g}",
                human_bytes(t.memory) if t.memory is not None else "-",
                t.via,
            )
        mem = g.tenants_memory
        total = f" of {human_bytes(g.total)}" if g.total else " (device total unknown: no NVML)"
        table.add_row(
            "",
            Text(f"{len(g.tenants)} co-tenants", style="bold"),
            "",
            f"{g.ray_shares:g}",
            (human_bytes(mem) if mem is not None else "-") + total,
            "",
        )
    parts: list[RenderableType] = [table]
    for g in view.gpus:
        for f in g.findings:
            parts.append(Text(f"{g.name}: {f}", style="bold yellow"))
    if view.without_gpu:
        parts.append(Text(f"no GPU: {', '.join(view.without_gpu)}", style="dim"))
    for u in view.unanswered:
        parts.append(Text(f"no answer: {u}", style="red"))
    return Group(*parts)
