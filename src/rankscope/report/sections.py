"""One function per feature: its section of the job report from the run's data (pure).

Each returns None when the run holds nothing of that feature, so a page shows only what
happened. A new feature adds one function here (the training's health: in `health.py`) and one
line in SECTIONS.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from rankscope.ranks import format_ranks
from rankscope.report.diagnosis import own_errors
from rankscope.report.environment import environment_section
from rankscope.report.health import alerts_section, logs_section, monitor_section
from rankscope.report.layout import (
    MAX_ROWS,
    fold_rows,
    other_jobs_holders,
    process_label,
    series,
    short_name,
)
from rankscope.report.model import Chart, RunData, Section, Table
from rankscope.report.traces import trace_section
from rankscope.report.trends import trends_section
from rankscope.units import ago, human_bytes

HANG_WAIT_S = 5.0
"""`rankscope hang`'s default: what the live hang snapshot calls a wait."""


def ranks_section(data: RunData, now: float) -> Section | None:
    """Who took part and who died, from the live registry or the run's registrations."""
    rows = [_process_row(p, data.deaths, now) for p in data.processes]
    if not rows:
        rows = [_registered_row(e) for e in _latest_registrations(data.events)]
    if not rows:
        return None
    dead = [r for r in rows if r[5] == "dead"]
    raised = own_errors(data.events)
    findings = tuple(
        f"{'rank ' + str(e['rank']) if e.get('rank') is not None else 'pid ' + str(e.get('pid'))}"
        f" raised {e.get('exc_type')}: {e.get('message', '')}"
        + (f" ({e['where']})" if e.get("where") else "")
        for e in raised[:8]
    )
    findings += tuple(
        f"{r[0]} is dead: {r[7] or 'no cause known'}" for r in dead[:8] if not _anonymous(r)
    )
    if data.first_death:
        findings = (data.first_death, *findings)
    odd = [r for r in rows if r[5] != "alive" and not _anonymous(r)]
    spare = [r for r in rows if _anonymous(r)]
    table = fold_rows(
        ("process", "group", "node", "pid", "actor", "state", "step", "cause"),
        odd,
        [r for r in rows if r[5] == "alive" and not _anonymous(r)],
        "alive",
    )
    if spare:  # Ray's own pool workers ran the setup hook too: they are no rank of the job
        table = replace(
            table,
            omitted="; ".join(
                x
                for x in (
                    table.omitted,
                    f"{len(spare)} Ray worker processes with no rank and no actor "
                    f"({sum(r[5] == 'dead' for r in spare)} ended) not shown",
                )
                if x
            ),
        )
    live = "a live snapshot" if data.processes else "as registered; the job is not live"
    summary = f"{len(rows)} processes, {len(dead)} dead ({live})"
    return Section("ranks", "Ranks", findings, summary, (table,))


def hang_section(data: RunData, now: float) -> Section | None:
    """Live hang findings, and the watchdog's reports written during the run."""
    findings: list[str] = []
    rows = []
    for report in data.hang:
        findings.extend(f["message"] for f in report.get("findings", ()))
        for g in report.get("groups", ()):
            waiting = format_ranks(g.get("waiting") or ()) or "-"
            rows.append((str(g["group"]), format_ranks(g["ranks"]), f"#{g['last_seq']}", waiting))
    written = [e for e in data.events if e.get("kind") == "hang_report"]
    if not data.hang:  # the job ended: the watchdog's reports are the evidence left
        for event in written:
            payload = event.get("payload", {})
            findings.extend(m for m in payload.get("findings", ()) if m not in findings)
    if not data.hang and not written:
        return None
    tables = (Table(("group", "ranks", "last collective", "in a collective"), tuple(rows)),)
    notes = tuple(
        f"watchdog report {ago(now, e.get('time', now))} ago: {e['payload'].get('path', '?')} "
        f"({e['payload'].get('reason', '')})"
        for e in written
    )
    summary = "live: " + (
        f"no rank has waited {HANG_WAIT_S:g} s in a collective that a peer has not entered"
        if data.hang and not findings
        else "see findings"
    )
    return Section("hang", "Hangs and collectives", tuple(findings), summary, tables, (), notes)


def stacks_section(data: RunData, now: float) -> Section | None:
    """Where every live process is, grouped by identical stack; ranks stuck behind another."""
    if not data.stacks:
        return None
    findings = [f["message"] for report in data.stacks for f in report.get("findings", ())]
    rows = []
    for report in data.stacks:
        for g in report.get("groups", ()):
            if not g.get("main_thread"):
                continue  # helper threads: `rankscope stacks` shows them
            ranks = [m["rank"] for m in g.get("members", ()) if m.get("rank") is not None]
            who = f"ranks {format_ranks(ranks)}" if ranks else f"{len(g['members'])} processes"
            rows.append((who, str(g.get("headline", ""))))
    table = Table(("who", "main thread is in"), tuple(rows[:MAX_ROWS]))
    count = sum(r.get("process_count", 0) for r in data.stacks)
    return Section("stacks", "Stacks", tuple(findings), f"{count} processes (live)", (table,))


def pending_section(data: RunData, now: float) -> Section | None:
    """The job's work Ray has not placed (`rankscope why-pending`), live: what no node can
    ever host is a finding; work waiting for resources others hold is listed with why."""
    verdicts = [v for p in data.pending for v in p.get("verdicts", ())]
    if not verdicts:
        return None
    rows = []
    findings = []
    for v in verdicts:
        demand = v.get("demand") or {}
        what = f"{demand.get('kind', '?')} {short_name(demand)}"
        rows.append((what, str(v.get("verdict", "?")), str(v.get("reason", ""))))
        if v.get("verdict") == "infeasible":
            findings.append(f"{what} can never be placed on this cluster: {v.get('reason', '')}")
        elif v.get("verdict") == "waiting" and (others := _other_jobs(v, data.job_id)):
            findings.append(f"{what} waits for resources another job holds: {others}")
    table = Table(("what", "verdict", "why"), tuple(rows[:MAX_ROWS]))
    notes = tuple(n for p in data.pending for n in p.get("notes", ()))
    summary = f"{len(verdicts)} pending, {len(findings)} that no node can host (live)"
    return Section(
        "pending", "Work Ray has not placed", tuple(findings[:8]), summary, (table,), (), notes
    )


def _other_jobs(verdict: Mapping[str, Any], job_id: str) -> str:
    """The holders of another job that this job's pending work waits for, named (empty when
    none: waiting for its own job's work is how a pipeline runs)."""
    return "; ".join(
        f"{h.get('kind', '?')} {short_name(h)} of job {h['job_id']} "
        f"({_resources(h.get('resources') or {})})"
        for h in other_jobs_holders(verdict, job_id)[:4]
    )


def _resources(resources: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}: {v:g}" if isinstance(v, float | int) else f"{k}: {v}"
                     for k, v in sorted(resources.items())[:4])  # fmt: skip


def consistency_section(data: RunData, now: float) -> Section | None:
    """`verify_distributed_tensors` checks: the ones out of tolerance and their odd ranks."""
    checks = [e for e in data.events if e.get("kind") == "consistency"]
    if not checks:
        return None
    latest: dict[str, dict[str, Any]] = {}
    for e in checks:  # the same check on every rank: one row per operation and time
        p = e.get("payload", {})
        latest[f"{p.get('operation_name')}@{round(e.get('time', 0), 1)}"] = p
    failing = [p for p in latest.values() if not p.get("ok", True)]
    rows = [
        (
            str(p.get("operation_name", "?")),
            "ok" if p.get("ok", True) else "DIFFERS",
            format_ranks(p.get("ranks") or ()),
            str(p.get("differing_total", 0)),
            str(p.get("summary", "")),
        )
        for p in sorted(latest.values(), key=lambda p: bool(p.get("ok", True)))
    ]
    findings = tuple(consistency_line(p) for p in failing[:8])
    table = Table(("operation", "result", "ranks", "tensors differing", "summary"), tuple(rows))
    summary = f"{len(latest)} checks, {len(failing)} out of tolerance"
    return Section("consistency", "Consistency across ranks", findings, summary, (table,))


def memory_section(data: RunData, now: float) -> Section | None:
    """OOM verdicts, leak verdicts and per-rank memory over time: from the newest memory
    profile `diagnose` wrote and from the ranks' live trend the report read."""
    ooms = [e.get("payload", {}) for e in data.events if e.get("kind") == "memory.oom"]
    written = [a for name, a in data.artifacts.items() if name.startswith("memory-profile")]
    live = data.artifacts.get("memory-live")
    profiles = written[-1:] + ([live] if live else [])  # the newest diagnose, then the live trend
    if not ooms and not profiles:
        return None
    findings = [f"{o.get('label', '?')}: {o.get('summary', o.get('error_type', ''))}" for o in ooms]
    rss: dict[str, list[tuple[float, float]]] = {}
    rows: dict[str, tuple[str, str, str]] = {}
    for profile in profiles:  # a process the diagnose profile holds is shown as it says
        body = profile.get("data") or {}
        labels = {r.get("pid"): r.get("label") for r in (body.get("memory") or {}).get("ranks", ())}
        for reply in body.get("replies", ()):
            pid = (reply.get("snapshot") or {}).get("pid", "?")
            label = str(labels.get(pid) or f"pid {pid}")
            if label in rows:
                continue
            history = reply.get("history") or [reply.get("snapshot") or {}]
            rss[label] = [(s["time"], s["rss"]) for s in history if "rss" in s and "time" in s]
            leaking = [f for f in reply.get("leaks", ()) if f.get("leak")]
            findings.extend(f"{label}: {f['metric']} leaks: {f['reason']}" for f in leaking)
            rows[label] = (
                label,
                human_bytes((reply.get("snapshot") or {}).get("rss", 0)),
                "; ".join(f["metric"] for f in leaking) or "no leak",
            )
    charts = (Chart("host RSS per rank", "bytes", series(rss)),) if rss else ()
    tables = (Table(("process", "RSS", "leak test"), tuple(rows.values())),) if rows else ()
    summary = f"{len(ooms)} out-of-memory verdicts, {len(written)} memory profiles"
    summary += ", the ranks' live memory trend" if live else ""
    return Section("memory", "Memory", tuple(findings), summary, tables, charts)


def consistency_line(payload: Mapping[str, Any]) -> str:
    """`gradient_sync: rank 2 differs ...`: the summary, named by its operation once."""
    name, summary = str(payload.get("operation_name", "?")), str(payload.get("summary", ""))
    return summary if summary.startswith(name) else f"{name}: {summary}"


def debug_section(data: RunData, now: float) -> Section | None:
    """Breakpoints that paused ranks, and how each session ended."""
    opened = [e for e in data.events if e.get("kind") == "debug_session_opened"]
    if not opened:
        return None
    ended = {
        e["payload"].get("id"): e["payload"].get("outcome", "timed out")
        for e in data.events
        if e.get("kind") in ("debug_session_closed", "debug_session_timeout")
    }
    rows = tuple(
        (
            str(p.get("rank")),
            str(p.get("location", "")),
            str(p.get("reason", "")),
            ended.get(p.get("id"), "open"),
        )
        for p in (e["payload"] for e in opened)
    )
    still = [r for r in rows if r[3] == "open"]
    findings = tuple(f"rank {r[0]} is paused at {r[1]}" for r in still[:8])
    first = rows[0]
    summary = (
        f"{len(rows)} session(s), {len(still)} still open; first: rank {first[0]} paused at "
        f"{first[1]} ({first[3]})"
    )
    table = Table(("rank", "where", "why", "outcome"), rows)
    return Section("debug", "Debug sessions", findings, summary, (table,))


def files_section(data: RunData, now: float) -> Section | None:
    """Every file the run left, and how to open it (traces in Perfetto)."""
    if not data.files:
        return None
    steps = [size for name, size in data.files if name.startswith("steps-")]
    rows = tuple(
        (name, human_bytes(size), _opened_with(name))
        for name, size in data.files
        if not name.startswith("steps-")
    )
    if steps:  # one per rank: one line, so the other files stay in view
        what = f"steps-*.json ({len(steps):,} files, one per rank)"
        rows += ((what, human_bytes(sum(steps)), "rankscope report (loss charts above)"),)
    return Section(
        "files",
        "Files of the run",
        (),
        f"{len(data.files)} files",
        (Table(("file", "size", "open with"), rows[-MAX_ROWS:]),),
    )


def _opened_with(name: str) -> str:
    if name.startswith("trace-"):
        return "Perfetto: ui.perfetto.dev, Open trace file (or chrome://tracing)"
    if name.endswith(".html"):
        return "a browser"
    if name == "events.jsonl":
        return "rankscope events"
    return "rankscope report (read above)" if name.endswith(".json") else ""


def events_section(data: RunData, now: float) -> Section | None:
    """How many events of each kind the run wrote (every feature's, known or not)."""
    if not data.events:
        return None
    counts = Counter(str(e.get("kind", "?")) for e in data.events)
    rows = tuple((kind, f"{n:,}") for kind, n in counts.most_common())
    return Section(
        "events", "Events", (), f"{len(data.events):,} events", (Table(("kind", "count"), rows),)
    )


SECTIONS: tuple[Callable[[RunData, float], Section | None], ...] = (
    ranks_section,
    hang_section,
    stacks_section,
    pending_section,
    consistency_section,
    memory_section,
    monitor_section,
    trends_section,
    trace_section,
    logs_section,
    alerts_section,
    environment_section,
    debug_section,
    files_section,
    events_section,
)
"""In the order the page shows them."""


# ----------------------------------------------------------------- helpers
def _process_row(p: Mapping[str, Any], deaths: Mapping[str, str], now: float) -> tuple[str, ...]:
    ctx = p["info"]["context"]
    return (
        process_label(ctx),
        str(ctx.get("group") or "-"),
        str(ctx.get("node_ip") or ctx.get("hostname") or "?"),
        str(ctx.get("pid")),
        str(ctx.get("actor_class") or "-"),
        str(p.get("state", "?")),
        str((p.get("progress") or {}).get("step", "-")),
        deaths.get(p["info"]["probe_id"], ""),
    )


def _anonymous(row: tuple[str, ...]) -> bool:
    """A process with no rank and no actor: one of Ray's pool workers, not a part of the job."""
    return row[0].startswith("pid ") and row[4] == "-"


def _registered_row(event: Mapping[str, Any]) -> tuple[str, ...]:
    ctx = event.get("payload", {}).get("context", {})
    return (
        process_label(ctx),
        str(ctx.get("group") or "-"),
        str(ctx.get("node_ip") or "?"),
        str(ctx.get("pid")),
        str(ctx.get("actor_class") or "-"),
        "registered",
        "-",
        "",
    )


def _latest_registrations(events: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    latest: dict[str, Mapping[str, Any]] = {}
    for e in events:
        if e.get("kind") == "probe.registered":
            latest[str(e.get("probe_id"))] = e
    return list(latest.values())
