"""Records of collective calls, as the recorder keeps them and the analysis reads them, and
the report `rankscope hang` prints (`HangReport`, also its `--json`)."""

from __future__ import annotations

import enum
import functools
import math
from dataclasses import dataclass, field, fields
from typing import Any


class CallState(str, enum.Enum):
    STARTED = "started"
    """Entered and not yet returned (or, for async work, not yet waited on)."""
    COMPLETED = "completed"
    FAILED = "failed"


@dataclass(frozen=True)
class CollectiveRecord:
    """One torch.distributed call on one rank."""

    group: str
    """The process group's name (`0` is the default group), the same on every member."""
    seq: int
    """The group's sequence number of this call (torch's own counter when it has one)."""
    op: str
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    start: float
    end: float | None
    state: CallState
    caller: str
    """file:line of the code that called torch.distributed."""
    p2p: bool = False
    error: str = ""
    """For a FAILED call, the backend's error in one line (gloo: "Connection closed by peer")."""
    source: str = ""
    """Who recorded it: "" for rankscope's recorder, else e.g. "torch flight recorder"."""

    def __reduce__(self) -> tuple[Any, ...]:
        values = dict(self.__dict__, state=self.state.value)
        return (_unpickled_record, tuple(values[name] for name in _RECORD_FIELDS))

    @property
    def numel(self) -> int:
        return sum(math.prod(s) for s in self.shapes)

    @property
    def signature(self) -> str:
        """`all_reduce(float32[4])`: what must match across ranks at one sequence number."""
        return f"{self.op}({self.tensors})"

    @property
    def tensors(self) -> str:
        parts = [
            f"{d}[{','.join(map(str, s))}]" for s, d in zip(self.shapes, self.dtypes, strict=True)
        ]
        return ", ".join(parts)


_RECORD_FIELDS = tuple(f.name for f in fields(CollectiveRecord))
_STATES = {state.value: state for state in CallState}


def _unpickled_record(*values: Any) -> CollectiveRecord:
    """A record from its pickled fields, as plain values. `rankscope hang` unpickles 4,096
    ranks' windows of records: a dataclass's own pickling is a third bigger and slower."""
    record = object.__new__(CollectiveRecord)
    record.__dict__.update(zip(_RECORD_FIELDS, values, strict=True))
    record.__dict__["state"] = _STATES[record.state]
    return record


@dataclass(frozen=True)
class RecorderSnapshot:
    """What a probe answers to `collectives`: its ring buffer and the groups it has seen."""

    records: tuple[CollectiveRecord, ...]
    groups: dict[str, tuple[int, ...]]
    """Group name -> global ranks of its members."""
    dropped: int
    """Records pushed out of the ring buffer since the start."""
    recording: bool
    flight: tuple[CollectiveRecord, ...] = ()
    """torch's own flight recorder entries, when the job turned it on (see `hang.worker_flight`)."""
    flight_groups: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Group name -> ranks, as the flight recorder knows them (NCCL's; empty for gloo)."""
    paused: bool = False
    """The rank's level is `off` (switched live): calls since then are not recorded."""


class DeathKind(str, enum.Enum):
    """How a process ended, as Ray's GCS tells it: on its own, or ended from outside."""

    EXITED = "exited"
    """Its worker process died on its own: an exit, a crash, a signal."""
    KILLED = "killed"
    """Someone called `ray.kill` on it (Ray Train's controller tears a group down so)."""
    OWNER_DIED = "owner_died"
    """The process that created it (a driver, a controller actor) died, and Ray took it along."""
    OUT_OF_MEMORY = "out_of_memory"
    """Ray's memory monitor (or the kernel's OOM killer) killed it."""
    NODE_DIED = "node_died"
    """Its node went away."""
    UNKNOWN = "unknown"
    """Ray keeps no cause for it (not an actor, or the GCS forgot it)."""


@dataclass(frozen=True)
class Death:
    """Why and when one registered process died, as far as Ray and its node know."""

    kind: DeathKind
    cause: str
    """One line: Ray's account, the kernel's OOM verdict, the last log lines."""
    died_at: float | None = None
    """When Ray saw it end (epoch seconds); None when Ray does not know."""


@functools.lru_cache(maxsize=1024)
def plain_shapes(shapes: tuple[Any, ...]) -> tuple[tuple[int, ...], ...]:
    """torch.Size shapes as plain int tuples; cached: a job repeats a few shapes (a drain
    freezes thousands of records, so each conversion counts)."""
    return tuple(tuple(int(d) for d in s) for s in shapes)


@functools.lru_cache(maxsize=256)
def dtype_names(dtypes: tuple[Any, ...]) -> tuple[str, ...]:
    """`torch.float32` as `float32`; cached like `plain_shapes`."""
    return tuple(str(d).removeprefix("torch.") for d in dtypes)


@functools.lru_cache(maxsize=1024)
def caller_text(caller: tuple[str, int]) -> str:
    return f"{caller[0]}:{caller[1]}"


def new_record(
    group: str, seq: int, op: str, shapes: tuple[tuple[int, ...], ...], dtypes: tuple[str, ...],
    start: float, end: float | None, state: CallState, caller: str, p2p: bool, error: str,
) -> CollectiveRecord:  # fmt: skip
    """A `CollectiveRecord` built at half the cost of its `__init__` (a frozen dataclass sets
    each field through `object.__setattr__`): a trace drain freezes thousands of them on the
    probe thread, which shares the GIL with training. Equal to the `__init__`-built one."""
    record = object.__new__(CollectiveRecord)
    record.__dict__.update(
        group=group, seq=seq, op=op, shapes=shapes, dtypes=dtypes, start=start, end=end,
        state=state, caller=caller, p2p=p2p, error=error, source="",
    )  # fmt: skip
    return record


class FindingKind(str, enum.Enum):
    HANG = "hang"
    """Some members of a group wait in a collective that others never entered."""
    MISMATCH = "mismatch"
    """At one sequence number, ranks called different ops, shapes or dtypes."""
    CROSS_GROUP = "cross_group_deadlock"
    """Ranks wait in different groups' collectives, each waiting for the other."""
    FAILED = "failed"
    """Members of a group failed in a collective: the backend raised (a peer went away)."""
    DEAD = "dead"
    """A registered rank's process is gone."""
    FIRST_DEATH = "first_death"
    """Several ranks died: which one died first, and how the others followed."""


@dataclass(frozen=True)
class HangFinding:
    kind: FindingKind
    message: str
    group: str | None = None
    ranks: tuple[int, ...] = ()
    """The ranks to look at: the ones that did not come, the odd ones, the dead."""
    seq: int | None = None


@dataclass(frozen=True)
class GroupState:
    """One line per group: who is where, for the healthy case too."""

    group: str
    ranks: tuple[int, ...]
    last_seq: int
    waiting: tuple[int, ...]


@dataclass(frozen=True)
class HangReport:
    job_id: str
    generated_at: float
    findings: tuple[HangFinding, ...]
    groups: tuple[GroupState, ...]
    missing_ranks: tuple[int, ...] = field(default=())
    """Ranks named by a group that sent no evidence (no probe, or it did not answer)."""
    group: str | None = None
    """The group these ranks form, when the job has several (verl's worker groups)."""
    paused_ranks: tuple[int, ...] = ()
    """Ranks at level `off` (switched live): they record no collectives meanwhile."""

    @property
    def ok(self) -> bool:
        return not self.findings
