"""The memory report: one self-contained HTML file (jinja2), charts drawn inline, no network."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rankscope._version import __version__
from rankscope.memory import analysis
from rankscope.memory.model import METRICS, AllocationSite, MemorySnapshot
from rankscope.units import human_bytes, human_seconds

CHART_POINTS = 1000
"""Snapshots per chart at most (thinned evenly)."""

CHART_GROUPS = (
    ("process (host)", ("rss", "anon", "uss", "tracemalloc")),
    ("node RAM", ("node_used",)),
    ("CUDA device", ("cuda_allocated", "cuda_reserved", "cuda_active", "device_used")),
    ("CUDA fragmentation", ("cuda_inactive_split",)),
    ("model", ("params", "grads", "optimizer_state")),
)


@dataclass(frozen=True)
class ProcessSection:
    """One process in a report: its timeline, verdicts and suspects."""

    label: str
    snapshots: tuple[MemorySnapshot, ...]
    leaks: tuple[analysis.LeakFinding, ...] = ()
    findings: tuple[analysis.Finding, ...] = ()
    suspects: tuple[AllocationSite, ...] = ()
    node: str = ""
    note: str = ""

    @property
    def summary(self) -> str:
        leaking = [f for f in self.leaks if f.leak]
        if leaking:
            return "; ".join(analysis.describe_leak(f) for f in leaking)
        if not self.snapshots:
            return "no snapshot"
        if not self.leaks:
            return f"{len(self.snapshots)} snapshot(s); no leak test (needs a profiler history)"
        return f"{len(self.snapshots)} snapshots; no leak"


def render_report(title: str, sections: Sequence[ProcessSection], *, overview: bool = False) -> str:
    """The report's HTML text."""
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    from rankscope.memory._template import TEMPLATE

    data = {"sections": [_chart_data(s) for s in sections]}
    return env.from_string(TEMPLATE).render(
        title=title,
        generated=time.strftime("%Y-%m-%d %H:%M:%S"),
        version=__version__,
        overview=[_overview_row(s) for s in sections] if overview else [],
        sections=[_section_view(s) for s in sections],
        data_json=_script_json(data),
    )


def write_report(
    path: str | os.PathLike[str],
    title: str,
    sections: Sequence[ProcessSection],
    *,
    overview: bool = False,
) -> str:
    target = os.fspath(path)
    parent = os.path.dirname(os.path.abspath(target))
    os.makedirs(parent, exist_ok=True)
    with open(target, "w", encoding="utf-8") as f:
        f.write(render_report(title, sections, overview=overview))
    return target


def _script_json(data: Any) -> str:
    """JSON safe inside <script>: no `</` that could close the tag."""
    return json.dumps(data, separators=(",", ":")).replace("</", "<\\/")


def _chart_data(section: ProcessSection) -> dict[str, Any]:
    snaps = analysis.thin(section.snapshots, CHART_POINTS)
    by_step = bool(snaps) and all(s.step is not None for s in snaps)
    if by_step:
        xs = [float(s.step or 0) for s in snaps]
        xlabel = "step"
    else:
        t0 = snaps[0].time if snaps else 0.0
        xs = [round(s.time - t0, 3) for s in snaps]
        xlabel = "seconds"
    rows = [s.metrics() for s in snaps]
    groups = []
    for title, names in CHART_GROUPS:
        series = []
        for name in names:
            values = [row.get(name) for row in rows]
            if any(v is not None for v in values):
                series.append({"metric": name, "title": METRICS[name].title, "values": values})
        if series:
            groups.append({"title": title, "series": series})
    return {"label": section.label, "x": xs, "xlabel": xlabel, "groups": groups}


def _section_view(s: ProcessSection) -> dict[str, Any]:
    return {
        "label": s.label,
        "summary": s.summary,
        "note": s.note,
        "leaks": [
            {
                "title": f.title,
                "leak": f.leak,
                "per_step": human_bytes(f.per_step) if f.points else "-",
                "per_second": human_bytes(f.per_second) if f.points else "-",
                "to_full": human_seconds(f.seconds_to_full)
                if f.seconds_to_full is not None
                else "-",
                "reason": f.reason,
            }
            for f in s.leaks
        ],
        "findings": [
            {"verdict": f.verdict.value, "message": f.message, "advice": f.advice}
            for f in s.findings
        ],
        "suspects": [
            {
                "location": a.location,
                "size_diff": human_bytes(a.size_diff),
                "count_diff": a.count_diff,
                "line": a.line,
            }
            for a in s.suspects
        ],
    }


def _overview_row(s: ProcessSection) -> dict[str, Any]:
    last = s.snapshots[-1] if s.snapshots else None
    hb = human_bytes

    def cuda(attr: str) -> str:
        return hb(getattr(last.cuda, attr)) if last is not None and last.cuda is not None else "-"

    verdicts = [f"leak ({f.metric})" for f in s.leaks if f.leak]
    verdicts += [f.verdict.value for f in s.findings]
    return {
        "label": s.label,
        "node": s.node or "-",
        "pid": last.pid if last is not None else "-",
        "rss": hb(last.rss) if last is not None else "-",
        "node_used": hb(last.node_used) if last is not None else "-",
        "allocated": cuda("allocated"),
        "reserved": cuda("reserved"),
        "device_used": cuda("device_used"),
        "verdicts": verdicts,
    }
