"""`rankscope logs` for ranks whose node is gone: their files stayed on a machine no task can
reach, so what is left is what their probes last sent the hub: the `logs` heartbeat summary
(per template: count, first and last time, each number's range), kept for dead probes as
their last words. Each such template becomes one line (source `summary`) merged with the
others, and one note per node says why those ranks show no more than that. Pure: no Ray.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from rankscope.logs.analysis import LogFilter, spread_text
from rankscope.logs.model import LogLine
from rankscope.ranks import format_ranks
from rankscope.runtime.protocol import ProbeStatus

__all__ = ["gone_node_logs", "summary_lines"]


def gone_node_logs(
    probes: Iterable[ProbeStatus], live_addresses: set[str], log_filter: LogFilter
) -> tuple[list[LogLine], list[str]]:
    """The lines (from the hub's summaries) of the processes on nodes not in `live_addresses`,
    and one note per such node naming it and its ranks."""
    by_node: dict[str, list[ProbeStatus]] = {}
    for p in probes:
        if p.context.node_ip and p.context.node_ip not in live_addresses:
            by_node.setdefault(p.context.node_ip, []).append(p)
    pattern = log_filter.pattern()
    lines: list[LogLine] = []
    notes: list[str] = []
    for address, gone in sorted(by_node.items()):
        shown = [p for p in gone if log_filter.ranks is None or p.context.rank in log_filter.ranks]
        if not shown:
            continue
        kept = [ln for p in shown for ln in summary_lines(p) if log_filter.keeps(ln, pattern)]
        lines.extend(kept)
        notes.append(_note(address, shown, len(kept)))
    return lines, notes


def _note(address: str, gone: Sequence[ProbeStatus], shown: int) -> str:
    ranks = [p.context.rank for p in gone if p.context.rank is not None]
    pids = [str(p.context.pid) for p in gone if p.context.rank is None]
    who = ", ".join(
        x
        for x in (
            f"rank{'s' if len(ranks) > 1 else ''} {format_ranks(ranks)}" if ranks else "",
            f"pid {','.join(pids)}" if pids else "",
        )
        if x
    )
    host = gone[0].context.hostname
    why = next((p.reason for p in gone if p.reason), "")
    return (
        f"node {address}{f' ({host})' if host else ''} is gone{f' ({why})' if why else ''}: "
        f"its log files cannot be read; {who}: {shown} lines from the last log summary each "
        f"sent the hub (one per template, with its count and number range)"
    )


def summary_lines(p: ProbeStatus) -> list[LogLine]:
    """One line per template of the probe's last `logs` summary: the template with each
    number's range (`loss=0.31..0.52`), `(xN)` when it was logged N times, at its last time."""
    summary = p.summaries.get("logs")
    templates = summary.get("templates") if isinstance(summary, dict) else None
    if not isinstance(templates, list):
        return []
    ctx = p.context
    lines = []
    for t in templates:
        try:
            count = int(t["count"])
            text = spread_text(str(t["template"]), _spreads(t.get("low"), t.get("high")))
            lines.append(
                LogLine(
                    time=float(t["last_time"]),
                    message=text + (f" (x{count})" if count > 1 else ""),
                    level=str(t.get("level", "INFO")),
                    rank=ctx.rank,
                    pid=ctx.pid,
                    node=ctx.hostname,
                    role=ctx.actor_class,
                    group=ctx.group,
                    extra={"count": count, "first_time": float(t.get("first_time", 0.0))},
                    source="summary",
                )
            )
        except (KeyError, TypeError, ValueError):
            continue  # a malformed template (another version's probe): left out
    return lines


def _spreads(low: Any, high: Any) -> list[str]:
    if not isinstance(low, list | tuple) or not isinstance(high, list | tuple):
        return []
    return [
        _number(a) if a == b else f"{_number(a)}..{_number(b)}"
        for a, b in zip(low, high, strict=False)
    ]


def _number(value: Any) -> str:
    x = float(value)
    if math.isnan(x):
        return "?"
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else f"{x:.6g}"
