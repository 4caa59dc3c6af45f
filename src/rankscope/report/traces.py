"""The run's traces read back into the job report: per rank, where a step's time goes (pure).

`rankscope.enable_detailed_tracing()` in the driver writes `trace-*.json` into the job's run
directory (`rankscope trace -o FILE` writes where it is told: copy it there to have it read).
Both are Chrome/Perfetto trace-event JSON: per rank a track named
`rank 3 (Worker) 10.0.0.5` with its spans and `step N` markers, a `... · collectives` track with
each call (its `wait_ms`, `transfer_ms`, `last_to_arrive`), tracks of other threads and of Ray
tasks. `digest` turns one such file into a small summary; `trace_section` shows the summaries.

A step's time is split exclusively, in this order: waiting in a collective for the last rank,
transferring in a collective, inside a top-level span of the rank's own track (by name), and
outside any span. Other threads' spans and Ray tasks overlap the training thread's time: they
are not part of the split.
"""

from __future__ import annotations

import datetime
import heapq
import itertools
import re
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from rankscope.report.layout import MAX_ROWS
from rankscope.report.model import RunData, Section, Table

__all__ = ["SLOWEST", "digest", "trace_section"]

STEP_TIMES = 512
"""Step markers kept per rank for the throughput chart."""
SLOWEST = 10
"""Slowest spans listed per trace."""
TOP_SPANS = 3
"""Span names shown per rank (the rest summed as `other spans`)."""
WAIT, TRANSFER, OUTSIDE = "collective wait", "collective transfer", "outside spans"
_RANK = re.compile(r"^(rank (\d+)|pid \d+)")
_OVERLAP = re.compile(r" \(overlap \d+\)$")


def digest(doc: Mapping[str, Any]) -> dict[str, Any]:
    """One trace file's JSON as a small summary: per rank its steps and the split of its step
    time, the slowest spans, stragglers, what the writer left out. Raises ValueError when it
    is not a rankscope trace."""
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        raise ValueError("no traceEvents: not a Chrome/Perfetto trace")
    other = doc.get("otherData") or {}
    base_s = float(other.get("base_epoch_ns") or 0) / 1e9
    ranks: dict[str, dict[str, list[Any]]] = {}
    tracks: dict[tuple[Any, Any], tuple[str, dict[str, list[Any]], str]] = {}
    for e in events:  # each track once: whose it is and what it holds
        if e.get("ph") != "M" or e.get("name") != "thread_name":
            continue
        track = str((e.get("args") or {}).get("name", ""))
        rank = _RANK.match(track)
        if rank is None:
            continue
        label, _, what = track.partition(" · ")
        lane = _OVERLAP.search(label)
        kind = "calls" if what.startswith("collectives") else "tasks" if what.startswith(
            "ray tasks"
        ) else "thread" if what else "lane" if lane else "main"  # fmt: skip
        own = ranks.setdefault(rank.group(1), {"spans": [], "steps": [], "calls": [], "label": []})
        if kind == "main":
            own["label"][:] = [label]
        tracks[(e.get("pid"), e.get("tid"))] = (rank.group(1), own, kind)
    slow: list[tuple[float, str, str, float]] = []
    for e in events:
        found = tracks.get((e.get("pid"), e.get("tid")))
        if found is None:
            continue
        who, own, kind = found
        ph = e.get("ph")
        if ph == "X":
            ts, dur = float(e.get("ts", 0.0)) / 1e6, float(e.get("dur", 0.0)) / 1e6
            name = str(e.get("name", "?"))
            if kind == "calls":
                args = e.get("args") or {}
                if "wait_ms" in args:  # the call itself, not its wait/transfer parts
                    own["calls"].append((ts, dur, args))
                    slow.append((dur, name, who, ts))
            elif kind != "tasks":
                if kind == "main":
                    own["spans"].append((ts, dur, name))
                slow.append((dur, name, who, ts))
        elif ph == "i" and kind == "main" and str(e.get("name", "")).startswith("step "):
            number = str(e["name"])[5:]
            step = int(number) if number.isdigit() else len(own["steps"])
            own["steps"].append((float(e.get("ts", 0.0)) / 1e6, step))
    slow = heapq.nlargest(SLOWEST, slow)
    return {
        "ranks": [_rank_row(who, parts) for who, parts in sorted(ranks.items(), key=_order)],
        "slowest": [
            {"name": n, "who": w, "seconds": d, "time": base_s + t if base_s else 0.0}
            for d, n, w, t in slow[:SLOWEST]
        ],
        "stragglers": _stragglers(ranks),
        "dropped_events": int(other.get("dropped_events") or 0),
        "dropped_spans": int(other.get("dropped_spans_in_workers") or 0),
    }


def _order(item: tuple[str, Any]) -> tuple[bool, int, str]:
    m = _RANK.match(item[0])
    return (m is None or m.group(2) is None, int(m.group(2)) if m and m.group(2) else 0, item[0])


def _rank_row(who: str, parts: Mapping[str, list[Any]]) -> dict[str, Any]:
    steps = sorted(t for t, _ in parts["steps"])
    starts = [s for s, _, _ in parts["spans"]] + [s for s, _, _ in parts["calls"]]
    ends = [s + d for s, d, _ in parts["spans"]] + [s + d for s, d, _ in parts["calls"]]
    if len(steps) >= 2:
        window = (steps[0], steps[-1])
    elif starts:
        window = (min(starts), max(ends))
    else:
        window = (0.0, 0.0)
    durations = [b - a for a, b in itertools.pairwise(steps)]
    return {
        "who": who,
        "label": (parts["label"] or [who])[0],
        "steps": len(durations),
        "step_times": _step_times(parts["steps"]),
        "step_median_s": statistics.median(durations) if durations else None,
        "window_s": window[1] - window[0],
        "split": split_time(parts["spans"], parts["calls"], window),
        "collectives": len(parts["calls"]),
        "last_arrivals": sum(1 for _, _, a in parts["calls"] if a.get("last_to_arrive")),
    }


def _step_times(marks: Sequence[tuple[float, int]]) -> list[list[float]]:
    """[[step, time]] of the rank's step markers, at most STEP_TIMES (evenly, the last kept)."""
    ordered = sorted(marks, key=lambda m: m[0])
    if len(ordered) > STEP_TIMES:
        every = len(ordered) / STEP_TIMES
        ordered = [*(ordered[int(i * every)] for i in range(STEP_TIMES - 1)), ordered[-1]]
    return [[float(step), t] for t, step in ordered]


def split_time(
    spans: Sequence[tuple[float, float, str]],
    calls: Sequence[tuple[float, float, Mapping[str, Any]]],
    window: tuple[float, float],
) -> dict[str, float]:
    """Seconds of `window` in each kind, exclusively: collective wait, then transfer, then the
    top-level span (by name), then outside spans. Example: a 1 s span `forward` holding a 0.2 s
    all_reduce that waited 0.15 s -> {forward: 0.8, collective wait: 0.15, transfer: 0.05}."""
    lo, hi = window
    marks: list[tuple[float, int, str]] = []
    for start, dur, name in _top_level(spans):
        marks += [(start, 1, name), (start + dur, -1, name)]
    for start, dur, args in calls:
        split = start + min(dur, float(args.get("wait_ms", 0.0)) / 1e3)
        marks += [(start, 1, WAIT), (split, -1, WAIT), (split, 1, TRANSFER)]
        marks.append((start + dur, -1, TRANSFER))
    marks.sort(key=lambda m: (m[0], m[1]))
    active: dict[str, int] = {}
    out: dict[str, float] = {}
    at = lo
    for t, delta, kind in [*marks, (hi, 0, "")]:
        t = min(max(t, lo), hi)
        if t > at:
            now = next((k for k in (WAIT, TRANSFER) if active.get(k)), None)
            now = now or next((k for k, n in active.items() if n > 0), OUTSIDE)
            out[now] = out.get(now, 0.0) + (t - at)
            at = t
        if kind:
            active[kind] = active.get(kind, 0) + delta
    return out


def _top_level(spans: Sequence[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """The spans no other span of the track holds (one track holds properly nested spans)."""
    out: list[tuple[float, float, str]] = []
    end = float("-inf")
    for start, dur, name in sorted(spans, key=lambda s: (s[0], -s[1])):
        if start >= end:
            out.append((start, dur, name))
            end = start + dur
    return out


def _stragglers(ranks: Mapping[str, Mapping[str, list[Any]]]) -> list[dict[str, Any]]:
    """`monitor.straggler`'s verdicts over the traced ranks (one group: the file has no group).

    Ranks that never mark steps (verl's workers, a Ray Train loop left unchanged) are scored
    over their window instead (`monitor.straggler.window_as_one_step`).
    """
    from rankscope.monitor.straggler import straggler_scores, window_as_one_step

    step_s: dict[int, list[float]] = {}
    wait_s: dict[int, list[float]] = {}
    last: dict[int, int] = {}
    calls: set[tuple[Any, Any]] = set()
    stepped = any(len(parts["steps"]) >= 2 for parts in ranks.values())
    for who, parts in ranks.items():
        m = _RANK.match(who)
        if m is None or m.group(2) is None:
            continue
        rank = int(m.group(2))
        if stepped and len(parts["steps"]) >= 2:
            steps = sorted(t for t, _ in parts["steps"])
            step_s[rank] = [b - a for a, b in itertools.pairwise(steps)]
            wait_s[rank] = _step_waits(steps, parts["calls"])
        elif not stepped:
            own = [(s, s + float(a.get("wait_ms", 0.0)) / 1e3, s + d) for s, d, a in parts["calls"]]
            one_step, one_wait = window_as_one_step({rank: own})
            if rank not in one_step:
                continue
            step_s[rank], wait_s[rank] = one_step[rank], one_wait[rank]
        else:
            continue
        last[rank] = sum(1 for _, _, a in parts["calls"] if a.get("last_to_arrive"))
        calls.update((a.get("group"), a.get("seq")) for _, _, a in parts["calls"])
    if len(step_s) < 2:
        return []
    unit = "a step" if stepped else "over the window"
    scores = straggler_scores(step_s, wait_s, last, len(calls), unit=unit)
    return [{"rank": s.rank, "why": s.why} for s in scores if s.is_straggler]


def _step_waits(
    steps: Sequence[float], calls: Sequence[tuple[float, float, Mapping[str, Any]]]
) -> list[float]:
    """Seconds waited in collectives within each step interval: each call's wait counts in the
    step it started in, cut at that step's end."""
    import numpy as np

    edges = np.asarray(steps, dtype=float)
    out = np.zeros(max(0, len(edges) - 1))
    if not calls or not len(out):
        return out.tolist()
    starts = np.array([s for s, _, _ in calls], dtype=float)
    waits = np.array([float(a.get("wait_ms", 0.0)) / 1e3 for _, _, a in calls])
    step = np.searchsorted(edges, starts, side="right") - 1
    inside = (step >= 0) & (step < len(out))
    step, starts, waits = step[inside], starts[inside], waits[inside]
    np.add.at(out, step, np.minimum(starts + waits, edges[step + 1]) - starts)
    return out.tolist()


def trace_section(data: RunData, now: float) -> Section | None:
    """Per rank, where a step's time goes in the run's newest trace; the slowest spans; where
    the trace files are and how to open them."""
    if not data.traces:
        return None
    read = [t for t in data.traces if "digest" in t]
    notes = [f"{t['name']}: {t['error']}" for t in data.traces if "error" in t]
    files = Table(
        ("trace file", "size", "open with"),
        tuple(
            (str(t.get("path") or t["name"]), f"{t.get('bytes', 0) / 2**20:.1f} MiB", _PERFETTO)
            for t in data.traces
        ),
    )
    if not read:
        summary = f"{len(data.traces)} trace files, none could be read (see below)"
        return Section("trace", "Traces", (), summary, (files,), (), tuple(notes))
    newest = read[-1]
    d = newest["digest"]
    rows = tuple(_split_row(r) for r in d["ranks"][:MAX_ROWS])
    more = len(d["ranks"]) - len(rows)
    split = Table(
        ("rank", "steps", "median step", WAIT, "transfer", "in spans (top 3)", OUTSIDE),
        rows,
        f"{more:,} more ranks not shown" if more else "",
    )
    slowest = Table(
        ("span", "who", "took", "started"),
        tuple((s["name"], s["who"], _ms(s["seconds"]), _clock(s["time"])) for s in d["slowest"]),
    )
    if d["dropped_events"] or d["dropped_spans"]:
        notes.append(
            f"{newest['name']}: {d['dropped_events']:,} events left out to fit the file's budget "
            f"and {d['dropped_spans']:,} spans dropped by the workers: the split is approximate"
        )
    findings = tuple(f"trace: {s['why']}" for s in d["stragglers"][:4])
    summary = (
        f"{len(data.traces)} trace file(s); the newest that reads, {newest['name']}, covers "
        f"{len(d['ranks'])} ranks"
    )
    return Section("trace", "Traces", findings, summary, (split, slowest, files), (), tuple(notes))


_PERFETTO = "ui.perfetto.dev, Open trace file (or chrome://tracing); nothing is uploaded"


def _split_row(r: Mapping[str, Any]) -> tuple[str, ...]:
    split: dict[str, float] = dict(r["split"])
    steps = r["steps"]
    per = max(1, steps)  # per step when there are steps, else over the window
    total = sum(split.values()) or 1.0

    def cell(seconds: float) -> str:
        return f"{_ms(seconds / per)} ({seconds / total:.0%})"

    wait, transfer, outside = (split.pop(k, 0.0) for k in (WAIT, TRANSFER, OUTSIDE))
    named = sorted(split.items(), key=lambda kv: -kv[1])
    spans = [f"{n} {cell(s)}" for n, s in named[:TOP_SPANS]]
    rest = sum(s for _, s in named[TOP_SPANS:])
    if rest:
        spans.append(f"other spans {cell(rest)}")
    median = "-" if r["step_median_s"] is None else _ms(r["step_median_s"])
    return (
        r["label"],
        str(steps) if steps else "no step marker",
        median,
        cell(wait),
        cell(transfer),
        "; ".join(spans) or "-",
        cell(outside),
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


def _clock(t: float) -> str:
    return datetime.datetime.fromtimestamp(t).strftime("%H:%M:%S.%f")[:-3] if t > 0 else "?"
