"""What crosses processes or reaches the user in tracing: probe chunks, per-rank traces, summaries.

Spans travel as plain tuples (`SpanTuple`), not dataclasses: a trace window may hold millions of
them, and a tuple is what the worker's ring already keeps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rankscope.hang.model import CollectiveRecord
from rankscope.monitor.straggler import StragglerScore
from rankscope.runtime.clock import ClockEstimate
from rankscope.runtime.protocol import ProbeStatus

SpanTuple = tuple[str, int, int, int, "dict[str, Any] | None"]
"""(name, start_ns, end_ns, thread ident, attrs or None), in the worker's `time.time_ns()`."""
StepTuple = tuple[int, int, int]
"""(time_ns, step number, thread ident) of one `rankscope.step()`."""
CounterTuple = tuple[int, int, int | None, int | None]
"""(time_ns, host RSS bytes, CUDA allocated bytes, CUDA peak allocated bytes)."""


@dataclass(frozen=True)
class TraceOptions:
    """What a trace window records on each worker; sent with the `trace` command's start."""

    ttl_s: float = 60.0
    """The worker stops by itself this long after the start (a CLI that died never leaves a job
    tracing)."""
    steps: int | None = None
    """Stop after this many `rankscope.step()` calls."""
    collectives: bool = True
    memory_counters: bool = True
    capacity: int = 200_000
    """Spans a worker keeps between two drains; older ones are dropped and counted."""
    torch_profiler_steps: int = 0
    """Also run torch.profiler for this many steps (0: not at all), started and stopped in the
    training thread at `rankscope.step()` boundaries."""
    ray_tasks: bool = True
    """Add the job's Ray tasks from Ray's task events (the CLI side reads them; needs the
    dashboard)."""


@dataclass(frozen=True)
class RayTask:
    """One Ray task or actor method call, as Ray's task events tell it."""

    task_id: str
    name: str
    kind: str
    """NORMAL_TASK, ACTOR_TASK, ACTOR_CREATION_TASK, DRIVER_TASK."""
    state: str
    node_id: str
    worker_pid: int | None
    submitted_ns: int
    running_ns: int | None
    end_ns: int | None
    parent_task_id: str = ""
    error: str = ""

    @property
    def pending_ns(self) -> int | None:
        """Scheduling delay: submitted -> running (None while it has not run)."""
        return None if self.running_ns is None else self.running_ns - self.submitted_ns


@dataclass(frozen=True)
class TraceChunk:
    """One drain of one worker: what it recorded since the previous drain."""

    session: str
    spans: tuple[SpanTuple, ...]
    steps: tuple[StepTuple, ...]
    collectives: tuple[CollectiveRecord, ...]
    counters: tuple[CounterTuple, ...]
    threads: dict[int, str]
    """Thread ident -> name, for the idents seen in spans and steps."""
    main_thread: int
    dropped_spans: int
    """Spans pushed out of the worker's ring since the session started."""
    clock: ClockEstimate | None
    started_ns: int
    """When this worker started recording (its own clock)."""
    stopped_ns: int | None
    """When it stopped (its own clock); None while it records."""
    new_collectives: int = 0
    """Collective calls since the previous drain (the CLI drains faster when they near the
    recorder's ring size)."""
    missed_collectives: int = 0
    """Collective calls the recorder's ring overwrote before a drain reached them, so far."""
    errors: tuple[str, ...] = ()
    """What went wrong on the worker (e.g. torch.profiler could not start)."""


@dataclass
class RankTrace:
    """Everything one process recorded in a window, merged from its chunks."""

    status: ProbeStatus
    spans: list[SpanTuple] = field(default_factory=list)
    steps: list[StepTuple] = field(default_factory=list)
    collectives: list[CollectiveRecord] = field(default_factory=list)
    counters: list[CounterTuple] = field(default_factory=list)
    threads: dict[int, str] = field(default_factory=dict)
    main_thread: int = 0
    dropped_spans: int = 0
    missed_collectives: int = 0
    clock: ClockEstimate | None = None
    started_ns: int = 0
    stopped_ns: int | None = None
    errors: list[str] = field(default_factory=list)
    tasks: list[RayTask] = field(default_factory=list)
    """The Ray tasks this process ran in the window (from Ray's task events)."""

    @property
    def offset_ns(self) -> int:
        """Add to this worker's times to get the hub's clock (0 when never estimated)."""
        return 0 if self.clock is None else round(self.clock.offset_s * 1e9)

    @property
    def label(self) -> str:
        """`rank 3 (Worker) 10.0.0.5`: the track's name."""
        ctx = self.status.context
        who = ctx.label if ctx.rank is not None else f"pid {ctx.pid}"
        actor = f" ({ctx.actor_class})" if ctx.actor_class else ""
        return f"{who}{actor} {ctx.node_ip}"


@dataclass(frozen=True)
class RankSummary:
    """One rank's row of the summary; shares are of the rank's recorded window."""

    label: str
    rank: int | None
    node_ip: str
    window_s: float
    user_share: float
    """Outside collectives: the rank's own work (and idle time, which needs Ray's task events
    to tell apart)."""
    wait_share: float
    """In collectives, waiting for the last rank to arrive."""
    transfer_share: float
    """In collectives after every rank arrived."""
    steps: int
    step_median_s: float | None
    step_p90_s: float | None
    collectives: int
    last_arrivals: int
    """Collectives this rank was the last of its group to enter."""
    spans: int
    dropped_spans: int
    clock_offset_ms: float | None
    clock_error_ms: float | None
    idle_share: float | None = None
    """Between Ray tasks (None without Ray's task events); not in `user_share`."""
    ray_tasks: int = 0


@dataclass(frozen=True)
class TraceSummary:
    """What `rankscope trace` prints and `--json` carries."""

    job_id: str
    path: str
    bytes_written: int
    events: int
    dropped_events: int
    """Events left out to keep the file within the byte budget (sampled repeated spans)."""
    dropped_spans: int
    """Spans the workers' rings dropped before a drain reached them."""
    missed_collectives: int
    """Collective calls the recorders' rings overwrote before a drain reached them."""
    clock_error_ms: float | None
    """The largest clock error of the ranks in the trace: events line up within it."""
    ranks: tuple[RankSummary, ...]
    stragglers: tuple[StragglerScore, ...]
    node_imbalance: float | None
    """Slowest node's mean compute time over the fastest node's (1.0: balanced)."""
    missing: tuple[str, ...] = ()
    """Processes that did not answer (or answered with an error), with why."""
    notes: tuple[str, ...] = ()
    pending_tasks: tuple[str, ...] = ()
    """Ray tasks of the job pending longer than the threshold, with their state."""

    @property
    def ok(self) -> bool:
        return not self.pending_tasks and not any(s.is_straggler for s in self.stragglers)
