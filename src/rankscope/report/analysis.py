"""From a run's data to a report: the sections, the verdict in one sentence, the timeline."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from rankscope.report.diagnosis import WAITS_FOR, diagnose, slow_culprits
from rankscope.report.layout import process_label
from rankscope.report.model import (
    Diagnosis,
    RunData,
    RunReport,
    Section,
    Severity,
    TimelineItem,
)
from rankscope.report.sections import SECTIONS, consistency_line

MAX_TIMELINE = 500
"""Timeline items at most: every warning and failure first, then the rest, evenly thinned."""

_SEVERITIES = {
    "critical": Severity.FAIL,
    "error": Severity.FAIL,
    "fail": Severity.FAIL,
    "warning": Severity.WARN,
    "warn": Severity.WARN,
}


def build_report(data: RunData, now: float) -> RunReport:
    built, notes = [], list(data.notes)
    for build in SECTIONS:
        try:
            section = build(data, now)
        except Exception as exc:  # one broken input costs its section, never the page
            what = build.__name__.removesuffix("_section")
            notes.append(
                f"the {what} section is left out: its data could not be read "
                f"({type(exc).__name__}: {exc})"[:300]
            )
            continue
        if section is not None:
            built.append(section)
    found = diagnose(built, data)
    sections = agree(tuple(built), found, bool(slow_culprits(data)))
    try:
        events = timeline(data)
    except Exception as exc:  # the page goes on without its timeline
        events = ()
        notes.append(f"the timeline is left out: the events could not be read ({exc!r})"[:300])
    return RunReport(
        job_id=data.job_id,
        source=data.source,
        generated_at=now,
        verdict=verdict(sections, data, found),
        timeline=events,
        sections=sections,
        notes=tuple(notes),
        diagnosis=found,
    )


def verdict(sections: Iterable[Section], data: RunData, found: Diagnosis | None) -> str:
    """The one sentence a user paged at 3 a.m. reads first: the diagnosis' sentence."""
    by_key = {s.key: s for s in sections}
    if found is not None:
        more = sum(len(s.findings) for s in by_key.values()) - 1
        below = f" ({more} more finding{'s' if more > 1 else ''} below)" if more > 0 else ""
        return found.sentence + below
    if not by_key:
        return (
            f"nothing recorded for job {data.job_id} yet: no events, no reports, no live "
            "processes (does the job call rankscope.init() or use the setup hook?)"
        )
    seen = "; ".join(
        f"{s.title.lower()}: {s.summary}"
        for s in by_key.values()
        if s.key not in ("ranks", "events", "files")
    )
    return "no finding: no hang, no dead rank, no inconsistency, no memory verdict" + (
        f" ({seen})" if seen else ""
    )


AGREEING = ("hang", "stacks", "ranks", "monitor")
"""Sections about where the ranks are and how they step: each must not look healthy beside a
verdict that names a failing rank."""


def agree(
    sections: tuple[Section, ...], found: Diagnosis | None, slow: bool = False
) -> tuple[Section, ...]:
    """One page, one story: a section of AGREEING with no finding of its own beside a failing
    verdict is not drawn healthy; it says that its data shows none of it, and why that can be.
    When the ranks a group waits for are slow, not stuck (`slow`), the hang and stacks findings
    about them become notes."""
    if slow:
        sections = tuple(
            replace(s, findings=(), level=Severity.WARN, notes=(*s.findings, *s.notes))
            if s.key in WAITS_FOR
            else s
            for s in sections
        )
    if found is None or found.level is not Severity.FAIL:
        return sections
    out = []
    for s in sections:
        if s.key in AGREEING and s.healthy and s.key != found.source:
            note = (
                f"no finding here; the verdict ({found.kind.value}: {found.culprit}) comes from "
                f"the {found.source} data, which this section's snapshot does not show (taken "
                "at another moment, or not this kind of evidence)"
            )
            s = replace(s, level=Severity.WARN, notes=(note, *s.notes))
        out.append(s)
    return tuple(out)


def timeline(data: RunData) -> tuple[TimelineItem, ...]:
    """The run's events on one time axis, with the live deaths, oldest first, bounded."""
    who = _labels(data)
    items = []
    for e in data.events:
        if e.get("kind") != "probe.registered":
            try:
                items.append(_item(e, who))
            except (AttributeError, TypeError, ValueError):  # one malformed event: left out
                continue
    registered = [e for e in data.events if e.get("kind") == "probe.registered"]
    if registered:
        first = min(e.get("time", 0.0) for e in registered)
        items.append(TimelineItem(first, "start", f"{len(who)} processes registered"))
    for p in data.processes:
        if p.get("state") == "dead":
            probe_id = p["info"]["probe_id"]
            cause = data.deaths.get(probe_id, "")
            text = "died" + (f": {cause}" if cause else "")
            items.append(
                TimelineItem(
                    p.get("last_seen", 0.0), "death", text, Severity.FAIL, who.get(probe_id, "?")
                )
            )
    items.sort(key=lambda i: i.time)
    if len(items) <= MAX_TIMELINE:
        return tuple(items)
    loud = [i for i in items if i.severity is not Severity.INFO][:MAX_TIMELINE]
    quiet = [i for i in items if i.severity is Severity.INFO]
    room = MAX_TIMELINE - len(loud)
    step = max(1, len(quiet) // max(1, room))
    return tuple(sorted([*loud, *quiet[::step][:room]], key=lambda i: i.time))


def _item(event: Mapping[str, Any], who: Mapping[str, str]) -> TimelineItem:
    kind = str(event.get("kind", "?"))
    payload = event.get("payload") or {}
    text, severity = _describe(kind, payload)
    sender = who.get(str(event.get("probe_id")), "")
    if not sender and payload.get("rank") is not None:
        sender = f"rank {payload['rank']}"
    return TimelineItem(float(event.get("time", 0.0)), kind, text, severity, sender)


def _describe(kind: str, payload: Mapping[str, Any]) -> tuple[str, Severity]:
    if kind == "hang_report":
        findings = payload.get("findings") or ["no finding"]
        return f"watchdog: {findings[0]}", Severity.FAIL if payload.get(
            "findings"
        ) else Severity.WARN
    if kind == "consistency":
        ok = payload.get("ok", True)
        return consistency_line(payload), (Severity.INFO if ok else Severity.FAIL)
    if kind == "memory.oom":
        return (
            f"out of memory: {payload.get('summary', payload.get('error_type', ''))}",
            Severity.FAIL,
        )
    if kind == "debug_session_opened":
        return f"paused at {payload.get('location')} ({payload.get('reason')})", Severity.WARN
    text = payload.get("message") or payload.get("summary") or kind
    severity = _SEVERITIES.get(str(payload.get("severity", "")).lower(), Severity.INFO)
    return str(text), severity


def _labels(data: RunData) -> dict[str, str]:
    """probe id -> `rank 3` (or `pid 123@host`), from the live registry or the registrations."""
    labels: dict[str, str] = {}
    for e in data.events:
        if e.get("kind") == "probe.registered":
            labels[str(e.get("probe_id"))] = process_label(
                (e.get("payload") or {}).get("context") or {}
            )
    for p in data.processes:
        labels[p["info"]["probe_id"]] = process_label(p["info"]["context"])
    return labels
