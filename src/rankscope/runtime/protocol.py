"""The messages probes, hub and CLI exchange: plain dataclasses, no Ray imports.

Everything here crosses process boundaries through Ray's pickling, so it stays small, typed and
free of behaviour (but `CommandResult`'s payload and the `Summaries`, pickled once and passed on
as bytes); the analysis layer reads the same records.
"""

from __future__ import annotations

import enum
import pickle
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from rankscope.context import RankContext


class ProbeState(str, enum.Enum):
    """What the hub knows about a registered process."""

    ALIVE = "alive"
    """Heartbeats arrive on time."""
    UNRESPONSIVE = "unresponsive"
    """Heartbeats stopped but the process still exists (GIL held, stopped, swapping)."""
    DEAD = "dead"
    """The process (or its node) is gone."""


@dataclass(frozen=True)
class ProbeInfo:
    """Sent by a probe when it registers, and again whenever its identity changes."""

    probe_id: str
    context: RankContext
    version: str
    create_time: float
    """The process's start time (psutil), so a reused pid is never taken for the old one."""


@dataclass(frozen=True)
class Event:
    """One record for the run directory (JSONL), e.g. a finding or a watchdog report."""

    kind: str
    time: float
    payload: dict[str, Any]


@dataclass(frozen=True)
class Progress:
    """How far the training loop got, as counted by `rankscope.step()`."""

    step: int
    last_progress: float
    """Wall-clock time of the last `rankscope.step()` (or of probe start when never called)."""
    waiting_since: float | None = None
    """When its oldest torch.distributed call still running began (the collective recorder's;
    wall clock); None when none runs or nothing records them (the level `off`)."""


SUMMARIES_BUDGET_BYTES = 4096
"""A heartbeat's summaries, every feature's together, packed: at most this many bytes. The hub
keeps each probe's last ones and takes one heartbeat per probe per interval, so this bounds
both its memory per probe and its bytes per heartbeat, whatever features are added."""


class Summaries(Mapping[str, Any]):
    """A probe's heartbeat summaries, by feature. Each crosses processes pickled once, as
    bytes, like a `CommandResult`'s payload: relays and the hub keep and pass them on without
    unpickling, and a reader unpickles those it reads: unpickling every heartbeat's
    `collectives` summary would be a large share of the hub's CPU at 4,096 ranks."""

    __slots__ = ("_packed", "_values")

    def __init__(
        self, values: Mapping[str, Any] | None = None, packed: Mapping[str, bytes] | None = None
    ) -> None:
        self._values = dict(values or {})
        self._packed = dict(packed or {})

    def __getitem__(self, name: str) -> Any:
        if name not in self._values:
            self._values[name] = pickle.loads(self._packed[name])
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self._values, *self._packed]))

    def __len__(self) -> int:
        return len(self._values.keys() | self._packed.keys())

    def only(self, names: Collection[str]) -> Summaries:
        """Those named, still packed."""
        if not names:
            return Summaries()
        values = {k: v for k, v in self._values.items() if k in names}
        return Summaries(values, {k: v for k, v in self._packed.items() if k in names})

    def replacing(self, values: Mapping[str, Any]) -> Summaries:
        """These with `values` in place of theirs, the others still packed."""
        packed = {k: v for k, v in self._packed.items() if k not in values}
        kept = {k: v for k, v in self._values.items() if k not in values and k not in packed}
        return Summaries({**kept, **values}, packed)

    def sizes(self) -> dict[str, int]:
        """Each summary's packed size in bytes, packing it now (once: the heartbeat that
        carries it sends these bytes); one that cannot be plain-pickled counts 0."""
        self._pack()
        return {name: len(self._packed.get(name, b"")) for name in self}

    def _pack(self) -> dict[str, Any]:
        """Pickle the values not packed yet; returns those that are not plain-picklable (a
        lambda, a local class): Ray's pickler takes them as they are."""
        as_is = {}
        for name, value in self._values.items():
            if name not in self._packed:
                try:
                    self._packed[name] = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
                except Exception:
                    as_is[name] = value
        return as_is

    def __reduce__(self) -> tuple[Any, ...]:
        if not self._values and not self._packed:
            return (Summaries, ())  # a row read without summaries: 4,096 a command
        return (Summaries, (self._pack(), self._packed))

    def __repr__(self) -> str:
        return f"Summaries({dict(self)!r})"


@dataclass(frozen=True)
class PollRequest:
    """A probe's heartbeat: its progress and the events batched since the last one."""

    probe_id: str
    progress: Progress
    events: tuple[Event, ...] = ()
    dropped_events: int = 0
    """Events this probe dropped so far because its buffer was full."""
    summaries: Mapping[str, Any] = field(default_factory=Summaries)
    """Each feature's latest small summary (last collectives, main-thread stack, ...), kept by
    the hub so that what a process last reported survives its death."""
    groups: dict[str, tuple[int, ...]] | None = None
    """The process groups this process has used (name -> global ranks), sent only when they
    changed since the hub last took them (and after every registration); None: unchanged. The
    hub keeps them per job and worker group (`Hub.groups`), so no heartbeat carries rank lists
    (4,096 ints each at 4,096 ranks)."""


@dataclass(frozen=True)
class Command:
    """Work for a probe to do on its own thread, e.g. `stacks`."""

    id: str
    kind: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PollReply:
    known: bool
    """False when the hub does not know this probe (it restarted): register again."""
    commands: tuple[Command, ...] = ()
    hub_received: float | None = None
    """The hub's `time.time()` when the poll arrived, and when it answered (`hub_replied`): with
    the probe's send and receive times, one clock-offset sample (`runtime.clock`)."""
    hub_replied: float | None = None
    interval: float | None = None
    """The heartbeat interval (long-poll wait) the hub asks for, longer than the configured
    one when many probes heartbeat (`runtime.capacity`); None: the configured one."""
    relay: bool = False
    """The hub asks the probe to poll through its node's relay (`runtime.relay`): many probes
    are live, and one batched call per node costs the hub what one probe's call costs."""
    stop: str = ""
    """Why the hub holds this process dead for good although it polls (its node is gone for
    Ray: an orphaned worker): the probe stops polling. Empty: carry on."""


@dataclass(frozen=True)
class BatchReply:
    """The hub's answer to a relay's batched poll (`Hub.poll_batch`): commands by probe id
    (only probes with commands, or unknown to the hub: `(False, ())`), the times and interval
    once for the whole node."""

    replies: dict[str, tuple[bool, tuple[Command, ...]]]
    hub_received: float
    hub_replied: float
    interval: float
    stop: dict[str, str] = field(default_factory=dict)
    """Probes told to stop polling, and why (`PollReply.stop`)."""
    relay: bool = True
    """The hub still asks for relays (`PollReply.relay`), passed on to every probe's reply."""


class CommandResult:
    """A probe's answer to one command.

    Its payload crosses processes pickled once, as bytes: a relay and the hub pass it on
    without unpickling it, and the reader unpickles it when it first reads `payload`: at 4,096
    ranks, unpickling every `stacks` reply and pickling it again for the CLI would be a large
    share of the hub's CPU per fan-out.

    A probe's answer also says how far its training got when it answered (`progress`, with
    `answered_at` on the rank's clock): the hub's registry has it from the last heartbeat,
    which at 4,096 ranks is up to the interval the hub asked for (25 s) old.
    """

    __slots__ = ("_packed", "_payload", "answered_at", "error", "ok", "probe_id", "progress")

    def __init__(
        self,
        probe_id: str,
        ok: bool,
        payload: Any = None,
        error: str = "",
        progress: Progress | None = None,
        answered_at: float | None = None,
    ) -> None:
        self.probe_id = probe_id
        self.ok = ok
        self.error = error
        self.progress = progress
        self.answered_at = answered_at
        self._payload = payload
        self._packed: bytes | None = None

    @property
    def payload(self) -> Any:
        if self._packed is not None and self._payload is _PACKED:
            self._payload = pickle.loads(self._packed)
        return self._payload

    def answered(self, progress: Progress, at: float) -> CommandResult:
        """This answer as given again at `at`, at `progress`: the payload (and its pickled
        bytes) shared, for a probe that answers a repeated command from what it kept."""
        self._pack()
        again = CommandResult(self.probe_id, self.ok, self._payload, self.error, progress, at)
        again._packed = self._packed
        return again

    def _pack(self) -> bool:
        """Pickle the payload once; False when it is not plain-picklable (a lambda, a local
        class): it then travels as it stands."""
        if self._packed is None:
            try:
                self._packed = pickle.dumps(self._payload, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:
                return False
        return True

    def __reduce__(self) -> tuple[Any, ...]:
        meta = (self.error, self.progress, self.answered_at)
        if not self._pack():
            return (CommandResult, (self.probe_id, self.ok, self._payload, *meta))
        return (_packed_result, (self.probe_id, self.ok, self._packed, *meta))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CommandResult):
            return NotImplemented
        mine = (self.probe_id, self.ok, self.error, self.payload)
        return mine == (other.probe_id, other.ok, other.error, other.payload)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"CommandResult(probe_id={self.probe_id!r}, ok={self.ok!r}, "
            f"payload={self.payload!r}, error={self.error!r})"
        )


_PACKED: Any = object()
"""`CommandResult._payload` while only its pickled bytes are here."""


def _packed_result(
    probe_id: str,
    ok: bool,
    packed: bytes,
    error: str,
    progress: Progress | None = None,
    answered_at: float | None = None,
) -> CommandResult:
    result = CommandResult(probe_id, ok, _PACKED, error, progress, answered_at)
    result._packed = packed
    return result


@dataclass(frozen=True)
class ProbeStatus:
    """One row of the registry, as `rankscope status` shows it."""

    info: ProbeInfo
    state: ProbeState
    registered_at: float
    last_seen: float
    progress: Progress
    dropped_events: int
    dropped_commands: int
    summaries: Mapping[str, Any] = field(default_factory=Summaries)
    reason: str = ""
    """Why the hub holds it dead although it may still heartbeat: "node gone: ..." once Ray
    declared its node dead (a raylet killed, a machine lost); empty otherwise."""
    relay: str = ""
    """The node relay it polls through (`runtime.relay`); empty when it polls the hub itself.
    A fan-out to relayed probes goes to their relays directly (`Hub.fan_out_routes`)."""

    @property
    def context(self) -> RankContext:
        return self.info.context


class ProbeRows(list[ProbeStatus]):
    """Registry rows as the hub returns them: the whole list crosses as one plain pickle. Ray
    pickles a method's result with cloudpickle, whose hook runs for every object; one plain
    pickle of the list costs the hub a fraction of that (docs/PERFORMANCE.md, Scale)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_unpickled_rows, (pickle.dumps(list(self), protocol=pickle.HIGHEST_PROTOCOL),))


def _unpickled_rows(packed: bytes) -> list[ProbeStatus]:
    rows: list[ProbeStatus] = pickle.loads(packed)
    return rows


@dataclass(frozen=True)
class FanOutResult:
    """Replies of every probe asked, and the probes that did not answer before the deadline."""

    replies: tuple[CommandResult, ...]
    missing: tuple[ProbeStatus, ...]


@dataclass(frozen=True)
class RelayRoute:
    """Probes that poll through one relay, and how to reach it: `endpoint.commands.remote(
    relay_id, ...)` (the relay's actor, or a simulator's that hosts many relays)."""

    endpoint: Any
    relay_id: str
    probe_ids: tuple[str, ...]


@dataclass(frozen=True)
class FanOutRoutes:
    """How a fan-out reaches its probes (`Hub.fan_out_routes`): through the hub for `direct`,
    the rest through their node relays, one call each, the hub not involved."""

    direct: tuple[str, ...]
    relayed: tuple[RelayRoute, ...]
    deadline_s: float
    """The hub's own command deadline, for a fan-out that names none."""


@dataclass(frozen=True)
class ExchangeResult:
    """What every participant of one rendezvous sent, and who did not come in time."""

    key: str
    payloads: dict[int, Any]
    missing: tuple[int, ...]


@dataclass(frozen=True)
class HubInfo:
    version: str
    run_dir: str
    started_at: float
    jobs: tuple[str, ...]
    dropped_events: int
    """Events the hub itself dropped because its writer fell behind."""
