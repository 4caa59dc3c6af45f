"""The trace as Chrome/Perfetto trace-event JSON, within a byte budget. Pure: text out.

Layout: one process per node (`node 10.0.0.5`); per rank a track named `rank 3 (Worker)
10.0.0.5` with its spans and step markers, a `collectives` track with each call split into
`wait` (for the last rank to arrive) and `transfer`, a track per other thread that recorded
spans, and a memory counter. Times are on the hub's clock (each rank's offset applied), in
microseconds from the first event; `otherData` states each rank's offset and error.

Events that overlap without nesting (async code on one thread, async collectives) go to extra
lanes of their track, so every track holds properly nested slices. Over the byte budget,
repeated events are sampled evenly, the most repeated names first (each name keeps as many as
the budget allows, up to all of them), and what was left out is counted.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rankscope.trace.analysis import CollectiveSlice
from rankscope.trace.model import RankTrace

__all__ = ["DEFAULT_BUDGET", "ExportStats", "assign_lanes", "render_trace", "sample_to_budget"]

DEFAULT_BUDGET = 100 * 2**20
MIB = 2**20

Item = tuple[str, str]
"""(sampling key, the event's JSON)."""


@dataclass(frozen=True)
class ExportStats:
    bytes: int
    events: int
    dropped: int
    """Events left out to stay within the budget."""
    dropped_by_name: dict[str, int] = field(default_factory=dict)


def assign_lanes(intervals: list[tuple[int, int]]) -> list[int]:
    """A lane per interval (sorted by start, longest first at equal starts) so that each lane
    holds properly nested intervals only. Example: [(0, 10), (2, 4), (3, 12)] -> [0, 0, 1]."""
    stacks: list[list[int]] = []
    out = []
    for start, end in intervals:
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1]:
                stack.append(end)
                out.append(lane)
                break
        else:
            stacks.append([end])
            out.append(len(stacks) - 1)
    return out


def sample_to_budget(items: list[Item], budget: int) -> tuple[list[Item], Counter[str]]:
    """Keep items within `budget` bytes (one separator each): every name keeps up to M events,
    evenly spaced, with M the largest that fits; returns the kept items (in order) and drops."""
    total = sum(len(text) + 2 for _, text in items)
    if total <= budget:
        return items, Counter()
    groups: dict[str, list[int]] = {}
    for i, (key, _) in enumerate(items):
        groups.setdefault(key, []).append(i)
    sizes = {k: sum(len(items[i][1]) + 2 for i in idx) / len(idx) for k, idx in groups.items()}

    def cost(m: int) -> float:
        return sum(min(len(idx), m) * sizes[k] for k, idx in groups.items())

    low, high = 0, max(len(idx) for idx in groups.values())
    while low < high:  # the largest m with cost(m) <= budget
        mid = (low + high + 1) // 2
        low, high = (mid, high) if cost(mid) <= budget else (low, mid - 1)
    m = low
    while True:
        keep: list[int] = []
        for idx in groups.values():
            n = len(idx)
            keep.extend(idx if n <= m else [idx[(j * n) // m] for j in range(m)])
        size = sum(len(items[i][1]) + 2 for i in keep)
        if size <= budget or m == 0:
            break
        m = max(0, m - max(1, m // 20))
    keep.sort()
    kept = [items[i] for i in keep]
    dropped = Counter(key for key, _ in items)
    dropped.subtract(key for key, _ in kept)
    return kept, +dropped


class _Writer:
    """Builds the events: tids, names and timestamps, each name encoded once."""

    def __init__(self, base_ns: int) -> None:
        self.base = base_ns
        self.meta: list[str] = []
        self.marks: list[Item] = []
        self.spans: list[Item] = []
        self._names: dict[str, str] = {}
        self.task_tracks: dict[str, tuple[int, int, int, int]] = {}
        """Task id -> (pid, tid, running, end) of its slice, for flow arrows."""
        self.submits: dict[str, tuple[int, int, int, int]] = {}
        """Task id -> (pid, tid, start, end) of the `submit NAME` span that submitted it."""
        self._tid = 0

    def name(self, text: str) -> str:
        encoded = self._names.get(text)
        if encoded is None:
            encoded = self._names[text] = json.dumps(text)
        return encoded

    def track(self, pid: int, name: str) -> int:
        self._tid += 1
        tid = self._tid
        self.meta.append(
            f'{{"ph":"M","name":"thread_name","pid":{pid},"tid":{tid},"args":{{"name":{self.name(name)}}}}}'
        )
        self.meta.append(
            f'{{"ph":"M","name":"thread_sort_index","pid":{pid},"tid":{tid},"args":{{"sort_index":{tid}}}}}'
        )
        return tid

    def add(self, into: list[Item], key: str, text: str) -> None:
        into.append((key, text))

    def slice(self, pid: int, tid: int, name: str, start: int, end: int, args: str = "") -> str:
        base = self.base
        return (
            f'{{"ph":"X","name":{self.name(name)},"pid":{pid},"tid":{tid},'
            f'"ts":{(start - base) / 1000:.3f},"dur":{(end - start) / 1000:.3f}{args}}}'
        )


def _args(attrs: dict[str, Any] | None) -> str:
    if not attrs:
        return ""
    return ',"args":' + json.dumps(attrs, default=str, separators=(",", ":"))


def _start_longest_first(item: tuple[int, int, str, Any]) -> tuple[int, int]:
    return item[0], -item[1]


def _main_thread(trace: RankTrace) -> int:
    """The rank's own track: the thread that steps, else the one with the most spans."""
    if trace.steps:
        return Counter(ident for _, _, ident in trace.steps).most_common(1)[0][0]
    if trace.spans:
        return Counter(s[3] for s in trace.spans).most_common(1)[0][0]
    return trace.main_thread


def _rank_events(w: _Writer, pid: int, trace: RankTrace, slices: list[CollectiveSlice]) -> None:
    label, offset = trace.label, trace.offset_ns
    main = _main_thread(trace)
    by_thread: dict[int, list[tuple[int, int, str, Any]]] = {main: []}
    for name, start, end, ident, attrs in trace.spans:
        by_thread.setdefault(ident, []).append((start + offset, end + offset, name, attrs))
    tracks: dict[tuple[int, int], int] = {}

    def track_of(ident: int, lane: int) -> int:
        tid = tracks.get((ident, lane))
        if tid is None:
            thread = "" if ident == main else f" · {trace.threads.get(ident, f'thread {ident}')}"
            extra = f" (overlap {lane})" if lane else ""
            tid = tracks[(ident, lane)] = w.track(pid, f"{label}{thread}{extra}")
        return tid

    main_tid = track_of(main, 0)
    base, out = w.base, w.spans
    for ident, items in by_thread.items():
        items.sort(key=_start_longest_first)
        lanes = assign_lanes([(s, e) for s, e, _, _ in items])
        prefixes: dict[tuple[str, int], str] = {}
        for (start, end, name, attrs), lane in zip(items, lanes, strict=True):
            prefix = prefixes.get((name, lane))
            if prefix is None:
                tid = track_of(ident, lane)
                prefix = prefixes[(name, lane)] = (
                    f'{{"ph":"X","name":{w.name(name)},"pid":{pid},"tid":{tid},"ts":'
                )
            args = _args(attrs) if attrs else ""
            text = f'{prefix}{(start - base) / 1000:.3f},"dur":{(end - start) / 1000:.3f}{args}}}'
            out.append((name, text))
            if attrs and "task_id" in attrs and name.startswith("submit "):
                w.submits[str(attrs["task_id"])] = (pid, track_of(ident, lane), start, end)
    for ts, step, _ in sorted(trace.steps):
        at = (ts + offset - w.base) / 1000
        mark = f'{{"ph":"i","s":"t","name":"step {step}","pid":{pid},"tid":{main_tid}'
        w.add(w.marks, "step", f'{mark},"ts":{at:.3f}}}')
    if slices:
        _collective_events(w, pid, label, slices)
    if trace.tasks:
        _task_events(w, pid, trace)
    for ts, rss, cuda, peak in trace.counters:
        values = {"rss_MiB": round(rss / MIB, 1)}
        if cuda is not None:
            values["cuda_allocated_MiB"] = round(cuda / MIB, 1)
            values["cuda_peak_MiB"] = round((peak or 0) / MIB, 1)
        at = round((ts + offset - w.base) / 1000, 3)
        counter = {"ph": "C", "name": f"memory · {label}", "pid": pid, "ts": at, "args": values}
        w.add(w.marks, "memory", json.dumps(counter, separators=(",", ":")))
    _ = main_tid


def _collective_events(w: _Writer, pid: int, label: str, slices: list[CollectiveSlice]) -> None:
    ordered = sorted(slices, key=lambda s: (s.start_ns, -s.end_ns))
    lanes = assign_lanes([(s.start_ns, s.end_ns) for s in ordered])
    tids: dict[int, int] = {}
    for s, lane in zip(ordered, lanes, strict=True):
        tid = tids.get(lane)
        if tid is None:
            tid = tids[lane] = w.track(
                pid, f"{label} · collectives" + (f" ({lane})" if lane else "")
            )
        r = s.record
        args = {
            "group": r.group, "seq": r.seq, "tensors": r.tensors, "bytes": s.bytes,
            "state": r.state.value, "caller": r.caller, "wait_ms": round(s.wait_ns / 1e6, 3),
            "transfer_ms": round(s.transfer_ns / 1e6, 3), "last_to_arrive": s.last,
            "ranks_in_trace": s.participants,
        }  # fmt: skip
        if r.error:
            args["error"] = r.error
        w.add(w.marks, r.op, w.slice(pid, tid, r.op, s.start_ns, s.end_ns, _args(args)))
        split = min(max(s.last_arrival_ns, s.start_ns), s.end_ns)
        if s.wait_ns and s.transfer_ns:
            w.add(w.marks, "wait", w.slice(pid, tid, "wait", s.start_ns, split))
            w.add(w.marks, "transfer", w.slice(pid, tid, "transfer", split, s.end_ns))
        elif s.wait_ns:
            w.add(w.marks, "wait", w.slice(pid, tid, "wait", s.start_ns, s.end_ns))


def _task_events(w: _Writer, pid: int, trace: RankTrace) -> None:
    """The Ray tasks this process ran, with their scheduling delay (submitted -> running)."""
    fallback = (trace.stopped_ns or trace.started_ns) + trace.offset_ns
    runs = sorted(
        ((t.running_ns or 0, max(t.end_ns or fallback, t.running_ns or 0), t) for t in trace.tasks),
        key=lambda r: (r[0], -r[1]),
    )
    lanes = assign_lanes([(s, e) for s, e, _ in runs])
    tids: dict[int, int] = {}
    for (start, end, task), lane in zip(runs, lanes, strict=True):
        tid = tids.get(lane)
        if tid is None:
            name = f"{trace.label} · ray tasks" + (f" ({lane})" if lane else "")
            tid = tids[lane] = w.track(pid, name)
        args = {
            "task_id": task.task_id, "type": task.kind, "state": task.state,
            "scheduling_delay_ms": round((task.pending_ns or 0) / 1e6, 3),
            "node_id": task.node_id, "worker_pid": task.worker_pid,
        }  # fmt: skip
        if task.error:
            args["error"] = task.error
        w.add(w.marks, "ray task", w.slice(pid, tid, task.name, start, end, _args(args)))
        w.task_tracks[task.task_id] = (pid, tid, start, end)


def _flows(w: _Writer, traces: list[RankTrace]) -> None:
    """An arrow from each traced task's submission to its run: from the driver's `submit NAME`
    span that carries its id, else from inside its parent task's slice."""
    flow = 0
    for trace in traces:
        for task in trace.tasks:
            child = w.task_tracks.get(task.task_id)
            origin = w.submits.get(task.task_id) or w.task_tracks.get(task.parent_task_id)
            if origin is None or child is None or task.running_ns is None:
                continue
            ppid, ptid, pstart, pend = origin
            at = min(max(task.submitted_ns, pstart), pend)
            flow += 1
            common = f'"cat":"ray","name":"submit","id":{flow}'
            start_ts = f"{(at - w.base) / 1000:.3f}"
            end_ts = f"{(child[2] - w.base) / 1000:.3f}"
            start = f'"pid":{ppid},"tid":{ptid},"ts":{start_ts}'
            end = f'"pid":{child[0]},"tid":{child[1]},"ts":{end_ts}'
            w.add(w.marks, "flow", f'{{"ph":"s",{common},{start}}}')
            w.add(w.marks, "flow", f'{{"ph":"f","bp":"e",{common},{end}}}')


def _base_ns(traces: list[RankTrace], slices: list[list[CollectiveSlice]]) -> int:
    starts = [t.started_ns + t.offset_ns for t in traces if t.started_ns]
    starts += [min(s[1] for s in t.spans) + t.offset_ns for t in traces if t.spans]
    starts += [s.start_ns for per in slices for s in per]
    starts += [t.running_ns for trace in traces for t in trace.tasks if t.running_ns is not None]
    return min(starts) if starts else 0


def render_trace(
    traces: list[RankTrace],
    slices: list[list[CollectiveSlice]],
    write: Callable[[str], Any],
    *,
    budget: int = DEFAULT_BUDGET,
    other: dict[str, Any] | None = None,
) -> ExportStats:
    """Write the trace-event JSON of `traces` through `write` (a file's `write`), within
    `budget` bytes; `other` goes into `otherData` with each rank's clock offset and error."""
    base = _base_ns(traces, slices)
    w = _Writer(base)
    nodes = sorted({(t.status.context.node_ip, t.status.context.node_id) for t in traces})
    pids = {node_id: i + 1 for i, (_, node_id) in enumerate(nodes)}
    shared_ip = len({ip for ip, _ in nodes}) < len(nodes)  # nodes of one machine (tests)
    for ip, node_id in nodes:
        pid = pids[node_id]
        name = w.name(f"node {ip}" + (f" ({node_id[:8]})" if shared_ip else ""))
        w.meta.append(f'{{"ph":"M","name":"process_name","pid":{pid},"args":{{"name":{name}}}}}')
        sort = f'"args":{{"sort_index":{pid}}}'
        w.meta.append(f'{{"ph":"M","name":"process_sort_index","pid":{pid},{sort}}}')
    order = sorted(range(len(traces)), key=lambda i: _rank_key(traces[i]))
    for i in order:
        trace = traces[i]
        _rank_events(w, pids[trace.status.context.node_id], trace, slices[i])
    _flows(w, traces)
    clocks = {
        t.label: None if t.clock is None else
        {"offset_ms": round(t.clock.offset_s * 1e3, 3), "error_ms": round(t.clock.error_s * 1e3, 3)}
        for t in traces
    }  # fmt: skip
    meta = {
        "producer": "rankscope trace",
        "base_epoch_ns": base,
        "clock": "hub",
        "clock_offsets": clocks,
        "dropped_spans_in_workers": sum(t.dropped_spans for t in traces),
        **(other or {}),
    }
    head = '{"displayTimeUnit":"ms","traceEvents":[\n'
    meta_text = ",\n".join(w.meta)
    room = budget - len(head) - len(meta_text) - 4096  # the tail with its drop counts
    marks, dropped = sample_to_budget(w.marks, room)
    room -= sum(len(t) + 2 for _, t in marks)
    spans, dropped_spans = sample_to_budget(w.spans, max(0, room))
    dropped.update(dropped_spans)
    meta["dropped_events"] = sum(dropped.values())
    meta["dropped_by_name"] = dict(dropped.most_common(20))
    size = 0
    for text in (head, meta_text):
        size += len(text.encode()) if not text.isascii() else len(text)
        write(text)
    events = len(w.meta)
    for group in (marks, spans):
        if group:
            chunk = ",\n" + ",\n".join(text for _, text in group)
            write(chunk)
            size += len(chunk) if chunk.isascii() else len(chunk.encode())
            events += len(group)
    tail = '\n],"otherData":' + json.dumps(meta, default=str) + "}\n"
    write(tail)
    size += len(tail.encode())
    return ExportStats(size, events, sum(dropped.values()), dict(dropped))


def _rank_key(trace: RankTrace) -> tuple[bool, int, int]:
    ctx = trace.status.context
    return (ctx.rank is None, ctx.rank or 0, ctx.pid)
