"""The CLI side of tracing: open a window on the chosen probes, drain it, build the trace.

A `TraceSession` starts recording on every chosen process (the `trace` probe command), drains
them every `DRAIN_EVERY_S` (the collective recorder keeps only its last 2,000 calls, and a
worker's span ring is bounded: draining often keeps both from wrapping), stops them, then
merges the chunks, applies each rank's clock offset and writes one trace-event JSON.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rankscope.errors import UserError
from rankscope.runtime import deadlines
from rankscope.runtime.ask import Command, Selection, ask_one, select
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeState, ProbeStatus
from rankscope.trace.analysis import merge_chunks, split_collectives, summarize, window_ns
from rankscope.trace.chrome import DEFAULT_BUDGET, ExportStats, render_trace
from rankscope.trace.model import RankTrace, RayTask, TraceChunk, TraceOptions, TraceSummary
from rankscope.trace.tasks import MAX_TASKS, attach_tasks, ray_task, untraced_workers

__all__ = ["TraceSession", "record_trace", "write_trace_file"]

DRAIN_EVERY_S = 0.5
FASTEST_DRAIN_S = 0.1
RING_SHARE = 0.5
"""Drain sooner when a worker's collectives since the last drain filled this share of the
recorder's ring (2,000 calls)."""
TTL_SLACK_S = 30.0
"""Workers stop by themselves this long after the window should have ended."""

Ask = Callable[[str, list[ProbeStatus], dict[str, Any]], list[tuple[ProbeStatus, Any, str]]]
"""Run a probe command on processes: (status, payload or None, error) per process."""


def hub_asker(client: HubClient) -> Ask:
    """Ask through the hub's fan-out; a process that did not answer gets an error line."""

    def asker(kind: str, probes: list[ProbeStatus], args: dict[str, Any]) -> list[Any]:
        answers = ask_one(client, probes, Command(kind, args), deadlines.TRACE_S)
        out = [(p, reply.payload, "") for p, reply in answers.answered]
        silent = "did not answer within {deadline}s"
        return out + [(p, None, why) for p, why in answers.unanswered(silent=silent)]

    return asker


@dataclass
class TraceSession:
    """One recording window over `probes`; `run(duration_s)` or `start()` / `stop()`."""

    ask: Ask
    probes: list[ProbeStatus]
    options: TraceOptions = field(default_factory=TraceOptions)
    session: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    chunks: dict[str, list[TraceChunk]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    _last_interval: float = DRAIN_EVERY_S
    _thread: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self, *, background: bool = False) -> None:
        """Turn recording on everywhere; with `background`, drain from a thread until `stop()`."""
        self._collect("start", {"options": self.options})
        if background:
            self._thread = threading.Thread(
                target=self._drain_loop, name="rankscope-trace-drain", daemon=True
            )
            self._thread.start()

    def run(self, duration_s: float) -> None:
        """Record for `duration_s` seconds, draining as it goes."""
        self.start()
        end = time.monotonic() + duration_s
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(self.interval, left))
            if end - time.monotonic() > 0.05:
                self.drain()
        self.stop()

    @property
    def interval(self) -> float:
        """Seconds to the next drain: sooner while collectives come fast enough to wrap the
        recorder's ring before then."""
        from rankscope.hang.worker_recorder import DEFAULT_CAPACITY

        fastest = max((c[-1].new_collectives for c in self.chunks.values() if c), default=0)
        if fastest <= 0:
            return DRAIN_EVERY_S
        room = DEFAULT_CAPACITY * RING_SHARE / fastest  # drains' worth of headroom
        return max(FASTEST_DRAIN_S, min(DRAIN_EVERY_S, self._last_interval * room))

    def drain(self) -> None:
        self._last_interval = self.interval
        self._collect("drain", {})

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(deadlines.TRACE_S + 5.0)
        self._collect("stop", {})

    def traces(self) -> list[RankTrace]:
        """Every process that answered at least once, its chunks merged."""
        out = []
        for status in self.probes:
            chunks = self.chunks.get(status.info.probe_id)
            if chunks:
                trace = merge_chunks(status, chunks)
                if status.info.probe_id in self.errors:
                    trace.errors.append(self.errors[status.info.probe_id])
                out.append(trace)
        return out

    def missing(self) -> tuple[str, ...]:
        """Processes that never answered or whose last answer was an error, and errors the
        workers reported (torch.profiler that could not start)."""
        labels = {p.info.probe_id: p.context.label for p in self.probes}
        out = [f"{labels[i]}: {e}" for i, e in self.errors.items() if i in labels]
        for pid, chunks in self.chunks.items():
            out += [f"{labels.get(pid, pid)}: {e}" for c in chunks for e in c.errors]
        return tuple(out)

    def _drain_loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.drain()
            except Exception as exc:  # a hub hiccup: the next drain catches up
                self.errors["drain"] = f"{type(exc).__name__}: {exc}"

    def _collect(self, action: str, extra: dict[str, Any]) -> None:
        args = {"action": action, "session": self.session, **extra}
        for status, chunk, error in self.ask("trace", self.probes, args):
            pid = status.info.probe_id
            if isinstance(chunk, TraceChunk):
                self.chunks.setdefault(pid, []).append(chunk)
                self.errors.pop(pid, None)
            elif pid in self.chunks or pid not in self.errors:  # else keep why it never
                self.errors[pid] = error or "no answer"  # started, not "no trace session"


def choose_probes(client: HubClient, selection: Selection) -> tuple[str, list[ProbeStatus]]:
    """The live processes to trace: one job (the only live one, the one running `--group`,
    or `--job`), by group and ranks."""
    jobs = select(client, selection)  # --group may pick the job
    if len(jobs) > 1:
        raise UserError(f"{len(jobs)} jobs are running ({', '.join(jobs)}): choose one with --job")
    job_id, probes = next(iter(jobs.items()))
    chosen = [p for p in probes if p.state != ProbeState.DEAD]
    if not chosen:
        ranks = selection.ranks
        what = f"with ranks {ranks}" if ranks else "alive"
        raise UserError(f"job {job_id} has no registered process {what} to trace")
    return job_id, chosen


def write_trace_file(
    session: TraceSession,
    job_id: str,
    path: str,
    *,
    budget: int = DEFAULT_BUDGET,
    end_ns: int | None = None,
) -> TraceSummary:
    """Merge the session's chunks, write the trace (gzip when `path` ends in .gz), summarize."""
    traces = session.traces()
    end = end_ns if end_ns is not None else time.time_ns()
    tasks: list[RayTask] | None = None
    workers: list[RankTrace] = []
    notes: list[str] = []
    if session.options.ray_tasks and traces:
        tasks, note = read_ray_tasks(job_id)
        if note:
            notes.append(note)
        if not tasks and note:
            tasks = None
        else:
            start = min(window_ns(t, end)[0] for t in traces)
            outside = attach_tasks(traces, tasks or [], (start, end))
            if outside:
                workers = untraced_workers(outside, job_id, _node_ips(), (start, end))
                notes.append(
                    f"{len(outside)} Ray tasks ran in {len(workers)} processes without a probe: "
                    "drawn on tracks of their own (`untraced worker`)"
                )
    slices = split_collectives(traces, end)
    meta = {"job_id": job_id, "session": session.session}
    stats = _write(path, traces + workers, slices + [[] for _ in workers], budget, meta)
    return summarize(
        job_id, traces, slices, end, path=os.path.abspath(path), bytes_written=stats.bytes,
        events=stats.events, dropped_events=stats.dropped, missing=session.missing(),
        tasks=tasks, notes=tuple(notes),
    )  # fmt: skip


def _write(
    path: str, traces: list[RankTrace], slices: Any, budget: int, other: dict[str, Any]
) -> ExportStats:
    _check_folder(path)
    temp = f"{path}.tmp-{os.getpid()}"
    opener: Any = gzip.open if path.endswith(".gz") else open
    with opener(temp, "wt", encoding="utf-8") as f:
        stats = render_trace(traces, slices, f.write, budget=budget, other=other)
    os.replace(temp, path)
    return stats


def _node_ips() -> dict[str, str]:
    """Ray's nodes' IPs by node id (the CLI has joined the cluster); empty when unreadable."""
    try:
        import ray

        return {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    except Exception:
        return {}


def _check_folder(path: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UserError(f"-o {path}: folder {directory} does not exist")


def record_trace(
    address: str | None,
    selection: Selection,
    *,
    duration_s: float,
    path: str | None,
    budget: int = DEFAULT_BUDGET,
    torch_profiler_steps: int = 0,
) -> TraceSummary:
    """`rankscope trace`: record `duration_s` of the live job, write the trace, summarize."""
    if duration_s <= 0:
        raise UserError(f"--duration {duration_s:g}s: give a positive duration, e.g. 10s")
    out = path or f"rankscope-trace-{time.strftime('%Y%m%d-%H%M%S')}.json"
    _check_folder(out)  # before recording, not after
    client = HubClient.attach(address)
    job_id, probes = choose_probes(client, selection)
    options = TraceOptions(
        ttl_s=duration_s + TTL_SLACK_S, torch_profiler_steps=torch_profiler_steps
    )
    session = TraceSession(hub_asker(client), probes, options)
    session.run(duration_s)
    if not session.chunks:
        reasons = "; ".join(session.missing()) or "no answer"
        raise UserError(f"no process of job {job_id} recorded anything: {reasons}")
    summary = write_trace_file(session, job_id, out, budget=budget)
    saved = _into_run_dir(client, job_id, out)
    return dataclasses.replace(summary, notes=(*summary.notes, saved)) if saved else summary


RUN_DIR_COPY_BYTES = 64 << 20
"""Traces up to this size are also kept in the job's run directory (what `rankscope report`
reads); larger ones, and gzipped ones, stay only where `-o` put them."""


def _into_run_dir(client: HubClient, job_id: str, path: str) -> str:
    """A copy of the trace beside the job's other reports, through the hub; a note, or ""."""
    try:
        if path.endswith(".gz") or os.path.getsize(path) > RUN_DIR_COPY_BYTES:
            return ""
        with open(path, encoding="utf-8") as f:
            text = f.read()
        name = f"trace-{time.strftime('%Y%m%d-%H%M%S')}.json"
        return f"also kept in the run directory: {client.write_artifact(job_id, name, text)}"
    except Exception as exc:  # the trace the user asked for is written; the copy is extra
        return f"not copied into the run directory: {type(exc).__name__}: {exc}"


def read_ray_tasks(job_id: str) -> tuple[list[RayTask], str]:
    """The job's tasks from Ray's state API, and an empty note, or none and why not."""
    try:
        from ray.util.state import list_tasks

        states = list_tasks(
            filters=[("job_id", "=", job_id)], detail=True, limit=MAX_TASKS, timeout=10,
            raise_on_missing_output=False,
        )  # fmt: skip
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return [], (
            f"Ray tasks left out: Ray's state API did not answer ({reason[:120]}); it needs the "
            "dashboard (ray start --head --include-dashboard=true)"
        )
    tasks = [t for t in (ray_task(s) for s in states) if t is not None]
    note = f"Ray tasks: the first {MAX_TASKS} only" if len(states) >= MAX_TASKS else ""
    return tasks, note
