"""The doctor's differences between nodes and ranks in the job report (pure).

Two doctors: `rankscope diagnose` compares the environment of a live job's ranks (versions,
NCCL/torch variables, /dev/shm); `rankscope doctor` checks every node of the cluster before a
job. The report asks `diagnose` itself while the job is live, and reads the `--json` output of
either saved in the job's run directory: `diagnose` saves its own there (`diagnose.json`, through
the hub); `doctor` only when told: `rankscope doctor --json > $RUN_DIR/<job>/doctor.json`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from rankscope.report.layout import MAX_ROWS
from rankscope.report.model import RunData, Section, Table

__all__ = ["environment_section", "saved_results"]

MAX_EVIDENCE = 8
"""Nodes shown per check's evidence (the differing ones first)."""


def saved_results(data: RunData) -> Iterator[tuple[str, str, Any]]:
    """(where from, "doctor" or "diagnose", its data): the live `diagnose`, then the saved
    `--json` outputs of the run directory, newest last."""
    for live in data.environment:
        yield "live diagnose", "diagnose", live
    for name, doc in data.artifacts.items():
        if isinstance(doc, Mapping) and doc.get("command") in ("doctor", "diagnose"):
            if doc["command"] == "doctor":
                yield name, "doctor", doc.get("data")
            else:  # `diagnose --json`: {job: {processes, findings, unanswered}}
                for job, env in (doc.get("data") or {}).items():
                    if job == data.job_id or len(doc["data"]) == 1:
                        yield name, "diagnose", env


def environment_section(data: RunData, now: float) -> Section | None:
    """What differs between the ranks (`diagnose`) and the nodes (`doctor`), and what failed."""
    found = list(saved_results(data))
    if not found:
        return None
    findings: list[str] = []
    tables: list[Table] = []
    notes: list[str] = []
    parts: list[str] = []
    diagnosed = [(src, env) for src, cmd, env in found if cmd == "diagnose"]
    if diagnosed:  # the live one when there is one, else the newest saved
        src, env = diagnosed[0] if diagnosed[0][0] == "live diagnose" else diagnosed[-1]
        rows = tuple(
            (str(f["what"]), str(f["message"]), ", ".join(f.get("odd_ones") or ()))
            for f in env.get("findings") or ()
        )
        findings.extend(f"environment: {r[1]}" for r in rows[:4])
        tables.append(Table(("what", "differs across ranks", "odd ones"), rows[:MAX_ROWS]))
        count = len(env.get("processes") or ())
        plural = "" if len(rows) == 1 else "s"
        parts.append(f"{src}: {count} processes, {len(rows)} difference{plural} across ranks")
        if not rows:
            notes.append(f"{src}: versions, NCCL/torch variables and /dev/shm agree across ranks")
        if env.get("unanswered"):
            notes.append(f"{src}: no answer from {', '.join(env['unanswered'][:8])}")
    doctors = [(src, doc) for src, cmd, doc in found if cmd == "doctor"]
    if doctors:
        src, doc = doctors[-1]
        checks = doc.get("checks") or ()
        odd = [c for c in checks if c.get("status") in ("fail", "warn")]
        findings.extend(
            f"doctor: {c['name']}: {c['summary']}" for c in odd if c["status"] == "fail"
        )
        tables.append(
            Table(
                ("check", "status", "on the nodes", "fix"),
                tuple(_check_row(c) for c in odd[:MAX_ROWS]),
            )
        )
        nodes = len(doc.get("nodes") or ())
        parts.append(f"{src}: {nodes} nodes, {len(checks)} checks, {len(odd)} not ok")
        if not odd:
            notes.append(f"{src}: every check passed on every node")
        if doc.get("unanswered"):
            notes.append(f"{src}: nodes that did not answer: {', '.join(doc['unanswered'][:8])}")
    return Section(
        "environment",
        "Environment (doctor)",
        tuple(findings[:8]),
        "; ".join(parts),
        tuple(t for t in tables if t.rows),
        (),
        tuple(notes),
    )


def _check_row(check: Mapping[str, Any]) -> tuple[str, ...]:
    evidence = _evidence(check.get("evidence") or {})
    return (str(check["name"]), str(check["status"]), evidence, str(check.get("fix", "")))


def _evidence(evidence: Mapping[str, str]) -> str:
    """Each node's evidence, the ones that differ from the most common first."""
    values = list(evidence.values())
    common = max(set(values), key=values.count) if values else ""
    ordered = sorted(evidence.items(), key=lambda kv: kv[1] == common)
    shown = [f"{node}: {text}" for node, text in ordered[:MAX_EVIDENCE]]
    more = len(ordered) - len(shown)
    return "; ".join(shown) + (f"; {more} more nodes" if more else "")
