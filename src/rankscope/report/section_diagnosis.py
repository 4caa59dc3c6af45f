"""Each section's first finding as a `Diagnosis`: its kind, culprit, where and why (pure).

`report.diagnosis` picks which section speaks; this module reads that section's data (the
same dicts `--json` prints) for the structured fields, so they never come from parsing the
sentence where the data has them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rankscope.ranks import format_ranks, parse_rank_spec
from rankscope.report.environment import saved_results
from rankscope.report.health import in_monitor_order, monitor_fails
from rankscope.report.layout import other_jobs_holders, short_name
from rankscope.report.model import Diagnosis, DiagnosisKind, RunData, Section

__all__ = ["IDLE_LOOP", "from_hang", "from_section", "rank_places", "ranks_text"]

FILE_LINE = re.compile(r"([\w.\-/]+\.py:\d+)")
_KINDS = {
    "hang": DiagnosisKind.HANG,
    "mismatch": DiagnosisKind.MISMATCH,
    "cross_group_deadlock": DiagnosisKind.CROSS_GROUP_DEADLOCK,
    "failed": DiagnosisKind.COLLECTIVE_FAILED,
}
_MONITOR_KINDS = {
    "non_finite": DiagnosisKind.NAN,
    "loss_spike": DiagnosisKind.LOSS_SPIKE,
    "loss_divergence": DiagnosisKind.LOSS_DIVERGENCE,
    "loss_oscillation": DiagnosisKind.LOSS_DIVERGENCE,
    "loss_disagreement": DiagnosisKind.DIVERGENCE,
    "straggler": DiagnosisKind.STRAGGLER,
    "collective_latency": DiagnosisKind.STRAGGLER,
    "throughput_drift": DiagnosisKind.THROUGHPUT_DRIFT,
    "device_memory": DiagnosisKind.MEMORY,
    "host_memory": DiagnosisKind.MEMORY,
}
_ALERT_KINDS = {
    "error_burst": DiagnosisKind.ERROR_BURST,
    "new_error": DiagnosisKind.ERROR_BURST,
    "silent_rank": DiagnosisKind.HANG,
    "exception": DiagnosisKind.EXCEPTION,
    **_MONITOR_KINDS,
}
SENTENCE_KINDS = {
    "ranks": DiagnosisKind.DEATH,
    "trace": DiagnosisKind.STRAGGLER,
    "memory": DiagnosisKind.OOM,
    "debug": DiagnosisKind.BREAKPOINT,
    "logs": DiagnosisKind.ERROR_BURST,
}
"""The kind of a section whose sentence is all there is to read (rank and line parsed)."""
IDLE_LOOP = re.compile(r"\bmain_loop worker\.py:\d+")
"""Ray's worker loop, where a rank waits for its next task: its last task has ended."""


def rank_places(stacks: Iterable[Mapping[str, Any]]) -> dict[tuple[str | None, int], str]:
    """(group, rank) -> where its active thread is (`load_batch data.py:41`), from live stacks."""
    places: dict[tuple[str | None, int], str] = {}
    for report in stacks:
        for g in report.get("groups", ()):
            for m in g.get("members", ()):
                if m.get("active") and m.get("rank") is not None:
                    places[(m.get("group"), int(m["rank"]))] = str(g.get("headline", ""))
    return places


def hang_group(report: Mapping[str, Any], finding: Mapping[str, Any], data: RunData) -> Any:
    """The ranks' group a hang finding is about, as their processes name it (a rendezvous, a
    worker group): the report's, when the job has several; else the one group the job's ranks
    form. The finding itself names torch's process group ("0"), which nothing else keys by."""
    if report.get("group"):
        return report.get("group")
    groups = {
        p["info"]["context"].get("group")
        for p in data.processes
        if p["info"]["context"].get("rank") is not None
    }
    return next(iter(groups)) if len(groups) == 1 else finding.get("group")


def from_section(
    section: Section, data: RunData, places: Mapping[tuple[str | None, int], str]
) -> Diagnosis:
    builders = {
        "hang": _hang_section,
        "stacks": _stacks_section,
        "pending": _pending_section,
        "consistency": _consistency_section,
        "monitor": _monitor_section,
        "alerts": _alerts_section,
        "environment": _environment_section,
    }
    build = builders.get(section.key)
    found = build(section, data, places) if build is not None else None
    if found is not None:
        return found
    sentence = section.findings[0]
    kind = SENTENCE_KINDS.get(section.key, DiagnosisKind.ALERT)
    where = _where_in(sentence)
    if section.key == "memory" and " leaks: " in sentence:  # "rank 2: rss leaks: ..."
        kind = DiagnosisKind.LEAK
        where = where or sentence.split(" leaks: ", 1)[0].rsplit(": ", 1)[-1]
    return Diagnosis(
        kind,
        _culprit_in(sentence),
        _ranks_in(sentence),
        where,
        sentence,
        sentence,
        source=section.key,
    )


def _hang_section(
    section: Section, data: RunData, places: Mapping[tuple[str | None, int], str]
) -> Diagnosis | None:
    for report in data.hang:
        for f in report.get("findings", ()):
            kind = _KINDS.get(str(f.get("kind")))
            if kind is not None:
                return from_hang({**f, "group": hang_group(report, f, data)}, data, places)
    return None


def from_hang(
    finding: Mapping[str, Any], data: RunData, places: Mapping[tuple[str | None, int], str]
) -> Diagnosis:
    kind = _KINDS.get(str(finding.get("kind")), DiagnosisKind.HANG)
    ranks = tuple(int(r) for r in finding.get("ranks") or ())
    group = finding.get("group")
    message = str(finding.get("message", ""))
    where = _place_of(places, group, ranks) or _where_in(message)
    if kind is DiagnosisKind.HANG and _idle(places, group, ranks):
        kind, message = DiagnosisKind.MISMATCH, _ended(message, ranks)
    elif kind is DiagnosisKind.HANG and in_debugger(data, group, ranks):
        kind, message = DiagnosisKind.BREAKPOINT, _paused(message, ranks, where)
    return Diagnosis(
        kind,
        ranks_text(ranks) if ranks else "?",
        ranks,
        where,
        message,
        message,
        group=group,
        source="hang",
    )


def _stacks_section(
    section: Section, data: RunData, places: Mapping[tuple[str | None, int], str]
) -> Diagnosis | None:
    for report in data.stacks:
        for f in report.get("findings", ()):
            ranks = tuple(int(r) for r in f.get("elsewhere") or ())
            group = f.get("group")
            message = str(f.get("message", ""))
            where = _place_of(places, group, ranks) or _where_in(message.rsplit("elsewhere", 1)[-1])
            kind = DiagnosisKind.HANG
            if _idle(places, group, ranks):
                kind, message = DiagnosisKind.MISMATCH, _ended(message, ranks)
            elif in_debugger(data, group, ranks):
                kind, message = DiagnosisKind.BREAKPOINT, _paused(message, ranks, where)
            return Diagnosis(
                kind,
                ranks_text(ranks) if ranks else "?",
                ranks,
                where,
                message,
                message,
                group=group,
                source="stacks",
            )
    return None


def _pending_section(
    section: Section, data: RunData, places: Mapping[tuple[str | None, int], str]
) -> Diagnosis | None:
    for p in data.pending:
        for v in p.get("verdicts", ()):
            if v.get("verdict") == "waiting":  # as pending_section: another job's holders
                held = other_jobs_holders(v, data.job_id)
                if held:
                    h = held[0]
                    return Diagnosis(
                        DiagnosisKind.WAITING,
                        f"{h.get('kind', '?')} {short_name(h)} of job {h['job_id']}",
                        (),
                        ", ".join(sorted((h.get("resources") or {}).keys())),
                        str(v.get("reason", "")),
                        section.findings[0],
                        source="pending",
                    )
            if v.get("verdict") != "infeasible":
                continue
            demand = v.get("demand") or {}
            culprit = f"{demand.get('kind', '?')} {short_name(demand)}"
            reason = str(v.get("reason", ""))
            short = sorted((demand.get("resources") or {}).keys())
            return Diagnosis(
                DiagnosisKind.INFEASIBLE,
                culprit,
                (),
                ", ".join(short) or reason,
                reason,
                section.findings[0],
                source="pending",
            )
    return None


def _consistency_section(
    section: Section, data: RunData, places: Mapping[tuple[str | None, int], str]
) -> Diagnosis | None:
    for e in data.events:
        p = e.get("payload") or {}
        if e.get("kind") != "consistency" or p.get("ok", True):
            continue
        odd = sorted(
            {r for t in p.get("differing", ()) for r in (t.get("outlier_ranks") or ())}
            | set(p.get("nan_ranks") or ())
            | set(p.get("inf_ranks") or ())
        )
        kind = (
            DiagnosisKind.NAN
            if p.get("nan_ranks") or p.get("inf_ranks")
            else (DiagnosisKind.DIVERGENCE)
        )
        return Diagnosis(
            kind,
            ranks_text(odd) if odd else "?",
            tuple(odd),
            str(p.get("operation_name", "")),
            str(p.get("summary", "")),
            section.findings[0],
            source="consistency",
        )
    return None


def _monitor_section(
    section: Section, data: RunData, places: Mapping[tuple[str | None, int], str]
) -> Diagnosis | None:
    for f in in_monitor_order(f for h in data.health for f in h.get("findings", ())):
        if monitor_fails(f):
            kind = _MONITOR_KINDS.get(str(f.get("kind")), DiagnosisKind.ALERT)
            ranks = tuple(int(r) for r in f.get("ranks") or ())
            step = f"step {f['step']}" if f.get("step") is not None else ""
            where, spent = _odd_place(data, kind, ranks)
            return Diagnosis(
                kind,
                ranks_text(ranks) if ranks else "?",
                ranks,
                where or step,
                str(f.get("evidence", "")) + spent,
                section.findings[0],
                group=f.get("group") or None,
                source="monitor",
            )
    sentence = section.findings[0]
    kind = DiagnosisKind.NAN if "non-finite" in sentence else DiagnosisKind.ALERT
    return Diagnosis(
        kind, _culprit_in(sentence), _ranks_in(sentence), "", sentence, sentence, source="monitor"
    )


def _alerts_section(
    section: Section, data: RunData, places: Mapping[tuple[str | None, int], str]
) -> Diagnosis | None:
    active: dict[tuple[str, Any], Mapping[str, Any]] = {}
    for e in sorted(data.events, key=lambda e: e.get("time", 0.0)):
        p = e.get("payload") or {}
        key = (str(p.get("rule")), p.get("rank"))
        if e.get("kind") == "alert":
            active[key] = p
        elif e.get("kind") == "alert_resolved":
            active.pop(key, None)
    for (rule, rank), p in active.items():
        if str(p.get("message", "")) != section.findings[0]:
            continue
        ranks = (int(rank),) if rank is not None else _ranks_in(section.findings[0])
        kind = _ALERT_KINDS.get(rule, DiagnosisKind.ALERT)
        where, spent = _odd_place(data, kind, ranks)
        return Diagnosis(
            kind,
            ranks_text(ranks) if ranks else rule,
            ranks,
            where or _where_in(section.findings[0]),
            section.findings[0] + spent,
            section.findings[0],
            group=p.get("group"),
            source="alerts",
        )
    return None


def _environment_section(
    section: Section, data: RunData, places: Mapping[tuple[str | None, int], str]
) -> Diagnosis | None:
    sentence = section.findings[0]
    for _, command, env in saved_results(data):
        for f in (env or {}).get("findings") or () if command == "diagnose" else ():
            odd = [str(o) for o in f.get("odd_ones") or ()]
            ranks = tuple(r for o in odd for r in _ranks_in(o))
            return Diagnosis(
                DiagnosisKind.ENVIRONMENT,
                ", ".join(odd[:4]) or "?",
                ranks,
                str(f.get("what", "")),
                str(f.get("message", "")),
                sentence,
                group=f.get("group"),
                source="environment",
            )
    return Diagnosis(
        DiagnosisKind.ENVIRONMENT,
        _culprit_in(sentence),
        _ranks_in(sentence),
        sentence.split(":", 1)[0],
        sentence,
        sentence,
        source="environment",
    )


# ----------------------------------------------------------------- helpers
def _odd_place(data: RunData, kind: DiagnosisKind, ranks: Sequence[int]) -> tuple[str, str]:
    """A straggler's own place (`RunData.odd_places`) and the words that say so."""
    if kind is not DiagnosisKind.STRAGGLER or len(ranks) != 1:
        return "", ""
    for p in data.odd_places:
        if p.get("rank") == ranks[0]:
            return str(p["place"]), (
                f"; it spends {p['share']:.0%} of its time in {p['place']}, its peers "
                f"{p['peers_share']:.0%} (sampled {p['seconds']:.1f} s)"
            )
    return "", ""


def _place_of(
    places: Mapping[tuple[str | None, int], str], group: str | None, ranks: Sequence[int]
) -> str:
    for r in ranks:
        where = places.get((group, r)) or next(
            (w for (g, rank), w in places.items() if rank == r and group is None), ""
        )
        found = FILE_LINE.findall(where)
        if found:
            return os.path.basename(found[-1])
    return ""


def _idle(
    places: Mapping[tuple[str | None, int], str], group: str | None, ranks: Sequence[int]
) -> bool:
    """Every culprit sits in Ray's worker loop: its task ended before the collective."""
    heads = [places.get((group, r), "") for r in ranks]
    return bool(heads) and all(IDLE_LOOP.search(h) for h in heads)


def _ended(message: str, ranks: Sequence[int]) -> str:
    who = ranks_text(ranks)
    verb = "has" if len(ranks) == 1 else "have"
    return (
        f"{who} {verb} no task running (idle in Ray's worker loop): its work returned "
        f"without the collective its group waits in (fewer collectives than its peers, or its "
        f"method ended early); {message}"
    )


def ranks_text(ranks: Sequence[int]) -> str:
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {format_ranks(ranks)}"


_RANKS_IN = re.compile(r"\branks? ([\d,\-]+)")


DEBUGGERS = ("/pdb.py", "/bdb.py", "/debugpy/", "/pydevd")
"""Files of a debugger's frames: a rank there is paused at a breakpoint, not stuck."""


def in_debugger(data: RunData, group: str | None, ranks: Sequence[int]) -> bool:
    """Every culprit's active thread has a debugger's frame (a `breakpoint()` left in the code,
    waiting for a terminal nobody has)."""
    paused = set()
    for report in data.stacks:
        for g in report.get("groups", ()):
            files = [str(f.get("filename", "")) for f in g.get("frames", ())]
            if not any(d in f for f in files for d in DEBUGGERS):
                continue
            for m in g.get("members", ()):
                if m.get("active") and m.get("rank") is not None:
                    paused.add((m.get("group"), int(m["rank"])))
    if group not in {g for g, _ in paused}:  # the recorder's group name ("0"), not the rank's
        return bool(ranks) and all(r in {rank for _, rank in paused} for r in ranks)
    return bool(ranks) and all((group, r) in paused for r in ranks)


def _paused(message: str, ranks: Sequence[int], where: str) -> str:
    who = ranks_text(ranks)
    return (
        f"{who} {'is' if len(ranks) == 1 else 'are'} paused in a debugger"
        + (f" at {where}" if where else "")
        + f" (a breakpoint left in the code?; `rankscope debug list`); {message}"
    )


def _ranks_in(sentence: str) -> tuple[int, ...]:
    """The ranks a sentence names first (`rank 3: ...`, `ranks 2,5-6 ...`)."""
    match = _RANKS_IN.search(sentence)
    if match is None:
        return ()
    try:
        return tuple(sorted(parse_rank_spec(match.group(1).strip(",-"))))
    except Exception:
        return ()


def _culprit_in(sentence: str) -> str:
    match = _RANKS_IN.search(sentence)
    return match.group(0).strip(",-") if match else sentence.split(":", 1)[0][:60]


def _where_in(sentence: str) -> str:
    found = FILE_LINE.findall(sentence)
    return os.path.basename(found[-1]) if found else ""
