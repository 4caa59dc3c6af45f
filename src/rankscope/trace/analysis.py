"""Pure analysis of a recorded window: merged chunks, collectives split into wait and transfer,
step times, per-rank shares, stragglers. No Ray, no I/O.

Times are aligned to the hub's clock with each rank's offset before anything is compared across
ranks. A collective's wait is the time from a rank's entry to the last rank's entry (the time
spent waiting for others); its transfer is the rest, to the rank's own exit. The last rank to
enter waits nothing: a straggler is the rank that arrives last, and the others wait for it.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from rankscope.hang.model import CallState, CollectiveRecord
from rankscope.monitor.straggler import StragglerScore, straggler_scores, window_as_one_step
from rankscope.runtime.protocol import ProbeStatus
from rankscope.trace.model import (
    RankSummary,
    RankTrace,
    RayTask,
    TraceChunk,
    TraceSummary,
)
from rankscope.trace.tasks import idle_share, pending_too_long

__all__ = [
    "CollectiveSlice",
    "merge_chunks",
    "percentile",
    "split_collectives",
    "step_durations",
    "summarize",
]

DTYPE_BYTES = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
    "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16, "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}  # fmt: skip
PENDING_AFTER_S = 10.0
"""A Ray task of the job still pending after this long is a finding."""
LATE_MARGIN_NS = 1_000_000
"""A rank is the last to arrive only when it came this much after the one before it (1 ms):
ranks within a millisecond of each other keep pace, whoever happens to come last."""


@dataclass(frozen=True)
class CollectiveSlice:
    """One collective call of one rank, on the hub's clock, split into wait and transfer."""

    record: CollectiveRecord
    start_ns: int
    end_ns: int
    last_arrival_ns: int
    """When the last participant in the trace entered this call (= start for the last one)."""
    participants: int
    """Ranks of the trace that made this call (the group may have more, untraced)."""
    last: bool
    """This rank entered last, `LATE_MARGIN_NS` or more after the one before it."""

    @property
    def wait_ns(self) -> int:
        return max(0, min(self.last_arrival_ns, self.end_ns) - self.start_ns)

    @property
    def transfer_ns(self) -> int:
        return max(0, self.end_ns - max(self.start_ns, self.last_arrival_ns))

    @property
    def bytes(self) -> int:
        dtypes = self.record.dtypes
        size = DTYPE_BYTES.get(dtypes[0], 4) if dtypes else 4
        return self.record.numel * size


def merge_chunks(status: ProbeStatus, chunks: Iterable[TraceChunk]) -> RankTrace:
    """One process's chunks as one trace; a collective seen in two drains is kept once, in
    its latest state."""
    trace = RankTrace(status=status)
    calls: dict[tuple[str, int, str, bool, float], CollectiveRecord] = {}
    for chunk in chunks:
        trace.spans.extend(chunk.spans)
        trace.steps.extend(chunk.steps)
        trace.counters.extend(chunk.counters)
        trace.threads.update(chunk.threads)
        trace.main_thread = chunk.main_thread
        trace.dropped_spans = max(trace.dropped_spans, chunk.dropped_spans)
        trace.missed_collectives = max(trace.missed_collectives, chunk.missed_collectives)
        trace.clock = chunk.clock or trace.clock
        trace.started_ns = trace.started_ns or chunk.started_ns
        trace.stopped_ns = chunk.stopped_ns or trace.stopped_ns
        trace.errors.extend(chunk.errors)
        for record in chunk.collectives:
            calls[(record.group, record.seq, record.op, record.p2p, record.start)] = record
    trace.collectives = sorted(calls.values(), key=lambda r: r.start)
    return trace


def split_collectives(traces: list[RankTrace], end_ns: int) -> list[list[CollectiveSlice]]:
    """Each trace's collectives, aligned and split; a call still running ends at `end_ns`
    (hub clock). Point-to-point calls have no common arrival: they are all transfer."""
    arrivals: dict[tuple[str, int, str], list[int]] = {}
    for trace in traces:
        offset = trace.offset_ns
        for record in trace.collectives:
            if not record.p2p:
                key = (record.group, record.seq, record.op)
                arrivals.setdefault(key, []).append(round(record.start * 1e9) + offset)
    out = []
    for trace in traces:
        offset = trace.offset_ns
        slices = []
        for record in trace.collectives:
            start = round(record.start * 1e9) + offset
            end = end_ns if record.end is None else round(record.end * 1e9) + offset
            late = False
            if record.p2p:
                last_arrival, count = start, 1
            else:
                entered = arrivals[(record.group, record.seq, record.op)]
                last_arrival, count = max(entered), len(entered)
                if count > 1 and start == last_arrival:
                    before = sorted(entered)[-2]
                    late = last_arrival - before >= LATE_MARGIN_NS
            slices.append(
                CollectiveSlice(record, start, max(end, start), last_arrival, count, last=late)
            )
        out.append(slices)
    return out


def step_durations(trace: RankTrace) -> list[float]:
    """Seconds between consecutive `rankscope.step()` calls (of the thread that steps)."""
    times = sorted(t for t, _, _ in trace.steps)
    return [(b - a) / 1e9 for a, b in itertools.pairwise(times)]


def percentile(values: list[float], q: float) -> float | None:
    """The `q` quantile (0..1) by linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def window_ns(trace: RankTrace, end_ns: int) -> tuple[int, int]:
    """The rank's recorded window on the hub's clock."""
    start = trace.started_ns + trace.offset_ns
    stop = end_ns if trace.stopped_ns is None else trace.stopped_ns + trace.offset_ns
    return start, max(stop, start + 1)


def _clipped(start: int, end: int, window: tuple[int, int]) -> int:
    return max(0, min(end, window[1]) - max(start, window[0]))


def rank_summary(
    trace: RankTrace, slices: list[CollectiveSlice], end_ns: int, *, task_events: bool = False
) -> RankSummary:
    """The rank's shares of its window, step times and collective counts; with Ray's task
    events, the idle time between its tasks apart from its own work."""
    window = window_ns(trace, end_ns)
    length = window[1] - window[0]
    wait = sum(_clipped(s.start_ns, min(s.last_arrival_ns, s.end_ns), window) for s in slices)
    busy = sum(_clipped(s.start_ns, s.end_ns, window) for s in slices)
    transfer = max(0, busy - wait)
    idle = idle_share(trace.tasks, window) if task_events else None
    steps = step_durations(trace)
    clock = trace.clock
    ctx = trace.status.context
    return RankSummary(
        label=trace.label,
        rank=ctx.rank,
        node_ip=ctx.node_ip,
        window_s=length / 1e9,
        user_share=max(0.0, 1.0 - busy / length - (idle or 0.0)),
        wait_share=wait / length,
        transfer_share=transfer / length,
        steps=len(steps),
        step_median_s=statistics.median(steps) if steps else None,
        step_p90_s=percentile(steps, 0.9),
        collectives=len(slices),
        last_arrivals=sum(1 for s in slices if s.last),
        spans=len(trace.spans),
        dropped_spans=trace.dropped_spans,
        clock_offset_ms=None if clock is None else clock.offset_s * 1e3,
        clock_error_ms=None if clock is None else clock.error_s * 1e3,
        idle_share=idle,
        ray_tasks=len(trace.tasks),
    )


def per_step_waits(trace: RankTrace, slices: list[CollectiveSlice]) -> list[float]:
    """Seconds of collective wait within each step interval (one value per step duration)."""
    times = sorted(t + trace.offset_ns for t, _, _ in trace.steps)
    waits = [0.0] * max(0, len(times) - 1)
    for s in slices:
        waited = (s.start_ns, min(s.last_arrival_ns, s.end_ns))
        for i in range(len(waits)):
            waits[i] += _clipped(*waited, (times[i], times[i + 1])) / 1e9
    return waits


def stragglers(
    traces: list[RankTrace], slices: list[list[CollectiveSlice]]
) -> list[StragglerScore]:
    """Straggler scores (`monitor.straggler`) of each group of ranks, from step times, the waits
    within each step, and who arrived last at collectives; worst first.

    A group whose ranks never call `rankscope.step()` (verl's workers or a Ray Train loop left
    unchanged) is scored over its window instead (`monitor.straggler.window_as_one_step`).
    """
    groups: dict[str | None, list[tuple[int, RankTrace, list[CollectiveSlice]]]] = {}
    for trace, per in zip(traces, slices, strict=True):
        ctx = trace.status.context
        if ctx.rank is not None:
            groups.setdefault(ctx.group, []).append((ctx.rank, trace, per))
    rows = []
    for members in groups.values():
        if len(members) < 2:
            continue
        unit = "a step"
        if not any(len(t.steps) >= 2 for _, t, _ in members):
            step_s, wait_s = _window_as_one_step(members)
            unit = "over the window"
        else:
            step_s = {rank: step_durations(t) for rank, t, _ in members}
            wait_s = {rank: per_step_waits(t, s) for rank, t, s in members}
        last = {rank: sum(1 for c in s if c.last) for rank, _, s in members}
        calls = {
            (c.record.group, c.record.seq) for _, _, s in members for c in s if c.participants > 1
        }
        rows.extend(straggler_scores(step_s, wait_s, last, len(calls), unit=unit))
    rows.sort(key=lambda r: (r.is_straggler, r.relative), reverse=True)
    return rows


def _window_as_one_step(
    members: list[tuple[int, RankTrace, list[CollectiveSlice]]],
) -> tuple[dict[int, list[float]], dict[int, list[float]]]:
    calls = {
        rank: [(s.start_ns / 1e9, s.last_arrival_ns / 1e9, s.end_ns / 1e9) for s in per]
        for rank, _, per in members
    }
    return window_as_one_step(calls)


def node_imbalance(rows: list[StragglerScore], nodes: dict[int, str]) -> float | None:
    """Slowest node's mean compute time over the fastest node's, or None with one node."""
    by_node: dict[str, list[float]] = {}
    for row in rows:
        if row.rank in nodes:
            by_node.setdefault(nodes[row.rank], []).append(row.compute_s)
    means = [statistics.mean(v) for v in by_node.values() if v]
    if len(means) < 2 or min(means) <= 0:
        return None
    return max(means) / min(means)


def summarize(
    job_id: str,
    traces: list[RankTrace],
    slices: list[list[CollectiveSlice]],
    end_ns: int,
    *,
    path: str,
    bytes_written: int,
    events: int,
    dropped_events: int,
    missing: tuple[str, ...] = (),
    tasks: list[RayTask] | None = None,
    pending_after_s: float = PENDING_AFTER_S,
    notes: tuple[str, ...] = (),
) -> TraceSummary:
    """The summary `rankscope trace` prints: a row per rank, straggler scores, imbalance, Ray
    tasks pending longer than `pending_after_s` (`tasks`: the job's, None without task events;
    give each trace its own first with `tasks.attach_tasks`)."""
    events_on = tasks is not None
    rows = [
        rank_summary(t, s, end_ns, task_events=events_on)
        for t, s in zip(traces, slices, strict=True)
    ]
    scores = stragglers(traces, slices)
    nodes = {
        ctx.rank: ctx.node_ip for ctx in (t.status.context for t in traces) if ctx.rank is not None
    }
    errors = [t.clock.error_s * 1e3 for t in traces if t.clock is not None]
    lines = list(notes)
    if any(t.clock is None for t in traces):
        lines.append("some ranks had no clock estimate yet (no heartbeat reply): not aligned")
    if not events_on:
        lines.append("idle time between Ray tasks is counted as user time (needs task events)")
    pending = [
        f"{t.name} ({t.task_id[:12]}) {t.state}, {(end_ns - t.submitted_ns) / 1e9:.0f} s pending"
        for t in pending_too_long(tasks or [], end_ns, pending_after_s)
    ]
    return TraceSummary(
        job_id=job_id,
        path=path,
        bytes_written=bytes_written,
        events=events,
        dropped_events=dropped_events,
        dropped_spans=sum(t.dropped_spans for t in traces),
        missed_collectives=sum(t.missed_collectives for t in traces),
        clock_error_ms=max(errors) if errors else None,
        ranks=tuple(sorted(rows, key=lambda r: (r.rank is None, r.rank or 0, r.label))),
        stragglers=tuple(scores),
        node_imbalance=node_imbalance(scores, nodes),
        missing=missing,
        notes=tuple(lines),
        pending_tasks=tuple(pending),
    )


def completed(record: CollectiveRecord) -> bool:
    return record.state is CallState.COMPLETED
