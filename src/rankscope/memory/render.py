"""The cluster view as a table: least headroom first, then alerts and leaks."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from rankscope.memory import analysis
from rankscope.units import human_bytes

__all__ = ["render"]

HOST_ALERT = analysis.MemoryThresholds().host_alert
DEVICE_ALERT = analysis.MemoryThresholds().device_alert


def render(view: analysis.ClusterMemory) -> RenderableType:
    """The table (CUDA columns only when some rank has a device), then alerts and leaks."""
    hb = human_bytes
    has_cuda = any(r.snapshot is not None and r.snapshot.cuda is not None for r in view.ranks)
    table = Table(
        title=f"job {view.job_id}: memory of {len(view.ranks)} processes (least headroom first)",
        title_justify="left",
    )
    several = len({r.group for r in view.ranks if r.rank is not None}) > 1
    columns = [*(["group"] if several else []), "rank", "node", "pid", "RSS", "USS", "node"]
    if has_cuda:
        columns += ["alloc", "reserved", "GPU"]
    columns += ["free", "leak"]
    for c in columns:
        left = c in ("group", "node", "leak")
        table.add_column(c, justify="left" if left else "right", no_wrap=True)
    for i, r in enumerate(view.ranks):
        if i > 0 and r.rank is None and view.ranks[i - 1].rank is not None:
            table.add_section()  # processes without a rank: apart from the ranks
        s = r.snapshot
        head = [
            *([r.group or "-"] if several else []),
            "-" if r.rank is None else str(r.rank),
            r.node,
            str(r.pid),
        ]
        if s is None:
            table.add_row(*head, Text(r.error or "no snapshot", style="red"))
            continue
        cells: list[str | Text] = [
            *head,
            hb(s.rss),
            hb(s.uss) if s.uss is not None else "-",
            _pct_text(r.host_used_fraction, HOST_ALERT),
        ]
        if has_cuda:
            cuda = s.cuda
            cells += [
                hb(cuda.allocated) if cuda is not None else "-",
                hb(cuda.reserved) if cuda is not None else "-",
                _pct_text(r.device_used_fraction, DEVICE_ALERT),
            ]
        leak = next((f for f in r.leaks if f.leak), None)
        cells += [
            f"{100 * r.headroom:.0f}%" if r.headroom is not None else "-",
            Text(f"+{hb(leak.per_step)}/step", style="bold red")
            if leak is not None
            else Text("no" if r.leaks else "-", style="green" if r.leaks else "dim"),
        ]
        table.add_row(*cells)
    parts: list[RenderableType] = [table]
    for r, alert in view.alerts:
        line = f"{r.label}: {alert.verdict.value}: {alert.message}"
        parts.append(Text(line, style="bold yellow"))
        parts.append(Text(f"    {alert.advice}", style="dim"))
    for r in view.leaking:
        for lf in r.leaks:
            if lf.leak:
                parts.append(Text(f"{r.label}: {analysis.describe_leak(lf)}", style="bold red"))
    parts.append(
        Text(
            "node: node RAM used; GPU: device used as the driver sees it; "
            "free: the smaller free share of node RAM and GPU",
            style="dim",
        )
    )
    return Group(*parts)


def _pct_text(fraction: float | None, alert: float) -> Text:
    if fraction is None:
        return Text("-")
    return Text(f"{100 * fraction:.0f}%", style="bold red" if fraction > alert else "")
