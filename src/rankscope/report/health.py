"""The training's health in the job report: the monitors, the logs and the alerts (pure)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from rankscope.ranks import format_ranks
from rankscope.report.layout import MAX_ROWS
from rankscope.report.model import RunData, Section, Severity, Table


def logs_section(data: RunData, now: float) -> Section | None:
    """What the ranks logged (`DistributedLogger`, `capture_logging`), folded across ranks by
    template with each number's spread, from the live summaries; errors are findings."""
    from rankscope.logs.analysis import spread_text

    folded: dict[tuple[str, str], dict[str, Any]] = {}
    for p in data.processes:
        rank = p["info"]["context"].get("rank")
        for t in ((p.get("summaries") or {}).get("logs") or {}).get("templates", ()):
            fold = folded.setdefault(
                (t["level"], t["template"]), {"ranks": set(), "count": 0, "low": [], "high": []}
            )
            fold["ranks"].add(rank if rank is not None else -1)
            fold["count"] += t["count"]
            for i, (low, high) in enumerate(zip(t.get("low", ()), t.get("high", ()), strict=False)):
                if i == len(fold["low"]):
                    fold["low"].append(low)
                    fold["high"].append(high)
                fold["low"][i], fold["high"][i] = (
                    min(fold["low"][i], low),
                    max(fold["high"][i], high),
                )
    if not folded:
        return None
    rows, findings = [], []
    for (level, template), f in sorted(folded.items(), key=lambda kv: -kv[1]["count"]):
        spreads = [
            f"{lo:.4g}" if lo == hi else f"{lo:.4g}..{hi:.4g}"
            for lo, hi in zip(f["low"], f["high"], strict=True)
        ]
        ranked = [r for r in f["ranks"] if r >= 0]
        who = (
            f"rank{'s' if len(ranked) > 1 else ''} {format_ranks(ranked)}" if ranked else "no rank"
        )
        text = spread_text(template, spreads)
        rows.append((level, who, f"{f['count']:,}", text))
        if level in ("ERROR", "CRITICAL"):
            findings.append(f"{who}: {text} (x{f['count']:,})")
    table = Table(
        ("level", "who", "count", "message (numbers as their spread)"), tuple(rows[:MAX_ROWS])
    )
    summary = f"{len(rows)} message templates from {len(data.processes)} processes (live)"
    return Section("logs", "Logs", tuple(findings[:8]), summary, (table,))


def alerts_section(data: RunData, now: float) -> Section | None:
    """Alerts the ranks raised (`rankscope alerts`): the ones still active are findings."""
    raised = [e for e in data.events if e.get("kind") in ("alert", "alert_resolved")]
    if not raised:
        return None
    last: dict[tuple[str, Any], Mapping[str, Any]] = {}
    for e in sorted(raised, key=lambda e: e.get("time", 0.0)):
        p = e.get("payload") or {}
        key = (str(p.get("rule")), p.get("rank"))
        if e["kind"] == "alert":
            last[key] = {**p, "resolved": False}
        elif key in last:
            last[key] = {**last[key], "resolved": True}
    alerts = [a for a in last.values() if "message" in a]
    active = [a for a in alerts if not a["resolved"]]
    rows = tuple(
        (
            str(a.get("severity", "")),
            str(a.get("rule", "")),
            "-" if a.get("rank") is None else str(a["rank"]),
            str(a.get("message", "")),
            "resolved" if a["resolved"] else "active",
        )
        for a in sorted(alerts, key=lambda a: (a["resolved"], str(a.get("severity"))))
    )
    findings = tuple(str(a["message"]) for a in active[:8])
    table = Table(("severity", "rule", "rank", "message", "state"), rows[:MAX_ROWS])
    return Section(
        "alerts", "Alerts", findings, f"{len(alerts)} alerts, {len(active)} active", (table,)
    )


def monitor_section(data: RunData, now: float) -> Section | None:
    """Training health: the monitors' live findings over every rank's series (stragglers,
    throughput drift, loss, the first NaN, memory, collectives), each rank's recent steps, and
    the monitor events the run wrote."""
    seen = [e for e in data.events if str(e.get("kind", "")).startswith("monitor.")]
    rows = [r for t in data.top for r in t.get("ranks", ())]
    if not seen and not rows and not any(h.get("findings") for h in data.health):
        return None
    said = [
        (f"{f['kind']}: {f['evidence']} (what to do: {f['advice']})", monitor_fails(f))
        for f in in_monitor_order(f for h in data.health for f in h.get("findings", ()))
    ]
    findings = [text for text, fails in said if fails]
    noted = tuple(text for text, fails in said if not fails)
    for e in seen:
        p = e.get("payload") or {}
        if e["kind"] == "monitor.non_finite":
            text = f"first non-finite value: {p.get('what')} at step {p.get('step')}"
        else:
            text = str(p.get("message") or p.get("summary") or e["kind"])
        if not any(text in f for f in findings):
            findings.append(text)
    table = Table(
        ("rank", "group", "step", "step time", "tokens/s", "collective wait", "straggler", "loss"),
        tuple(
            (
                str(r["rank"]),
                str(r.get("group") or "-"),
                str(r.get("step", "-")),
                f"{r.get('step_s', 0.0) * 1e3:.1f} ms",
                f"{r.get('tokens_per_s', 0.0):,.0f}",
                f"{r.get('wait_s', 0.0) * 1e3:.1f} ms",
                f"{r.get('straggler', 0.0):.2f}x",
                "-" if r.get("loss") is None else f"{r['loss']:.4g}",
            )
            for r in rows[:MAX_ROWS]
        ),
        f"{len(rows) - MAX_ROWS:,} more ranks not shown" if len(rows) > MAX_ROWS else "",
    )
    summary = f"{len(rows)} ranks reporting steps (live), {len(seen)} monitor events"
    return Section(
        "monitor",
        "Training health",
        tuple(findings[:8]),
        summary,
        (table,),
        notes=noted[:8],
        level=Severity.WARN if noted else Severity.INFO,
    )


NOTED_ONLY = frozenset({"loss_oscillation"})
"""Monitor findings the page notes but does not fail on (as `rankscope alerts` raises none):
on a shared machine they are noisy. A throughput that rises or only fluctuates is noted too;
a drop fails."""


MONITOR_ORDER = (
    "non_finite",
    "loss_disagreement",
    "loss_spike",
    "loss_divergence",
    "straggler",
    "collective_latency",
    "throughput_drift",
    "device_memory",
    "host_memory",
)
"""Which monitor finding the page and the verdict name first: a sharp event before a trend,
one rank's own before the whole job's (a rank's slowness drags every rank's throughput). A
replica whose loss stays apart from its group's goes before spikes: the jump into its new
level is one, and the all_reduce carries it to the others as spikes of their own."""


def in_monitor_order(findings: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """By kind (`MONITOR_ORDER`), and within a kind the earliest step first: a spike on one
    rank reaches the others through the next all_reduce, steps later."""

    def place(f: Mapping[str, Any]) -> tuple[int, float]:
        kind = f.get("kind")
        step = f.get("step")
        return (
            MONITOR_ORDER.index(kind) if kind in MONITOR_ORDER else len(MONITOR_ORDER),
            float(step) if isinstance(step, int | float) else math.inf,
        )

    return sorted(findings, key=place)


def monitor_fails(finding: Mapping[str, Any]) -> bool:
    kind = str(finding.get("kind", ""))
    if kind == "throughput_drift":
        return float(finding.get("value") or 0.0) < 0
    return kind not in NOTED_ONLY
