"""The hub's registry of probes, and the rules that turn a probe's silence into a state.

Probes are kept per job, so several jobs on one cluster never mix. A probe that misses its
heartbeats is not simply declared dead: the hub asks the probe's own node whether that very
process still exists (see `liveness`), and only a process proven gone is dead; one still there
is unresponsive (GIL held, stopped, swapping). Dead probes stay, so a finished job can still be
inspected, up to `MAX_DEAD_RECORDS`; the oldest go first.

A probe on a node Ray declared dead (its raylet killed, its machine lost) is dead for good, with
"node gone" as its reason, even while it still heartbeats: a worker can outlive its raylet and
keep its connection to the hub, but Ray has given up on it (its actors are dead, nothing is
scheduled there again) and rankscope must not disagree.

No Ray here: the actor drives the clock and the checks; this module holds the records and
decides, so the rules read (and can be tested) without a cluster.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from rankscope.runtime.capacity import dead_after_for
from rankscope.runtime.mailbox import Mailbox
from rankscope.runtime.protocol import (
    PollRequest,
    ProbeInfo,
    ProbeState,
    ProbeStatus,
    Progress,
    Summaries,
)

__all__ = ["EARLY_LOOK", "MAX_DEAD_RECORDS", "MAX_GROUPS", "ProbeRecord", "Registry"]

MAX_DEAD_RECORDS = 10_000
"""Dead probes kept so a finished job can still be inspected; the oldest go first."""
MAX_GROUPS = 1024
"""Process groups kept per job and worker group; past it, new names are ignored."""
EARLY_LOOK = 0.5
"""A probe silent for this share of `dead_after` is looked for once: a process proven gone is
dead at once (a killed rank's peers fail within a second, and the verdict and the death alert
should not wait out the rest of `dead_after`); one still there waits for `dead_after`, as a
late heartbeat on a loaded node is no death."""


@dataclass
class ProbeRecord:
    """What the hub knows about one probe, and the commands waiting for it."""

    info: ProbeInfo
    registered_at: float
    last_seen: float
    progress: Progress
    mailbox: Mailbox
    state: ProbeState = ProbeState.ALIVE
    dropped_events: int = 0
    summaries: Summaries = field(default_factory=Summaries)
    checking: bool = False
    """A liveness check of this probe's process is under way; no second one is started."""
    looked_early_at: float = -1.0
    """The `last_seen` of the silence an early check last looked at: one early look a silence."""
    reason: str = ""
    """Set once its node is declared dead ("node gone: ..."): dead for good, heartbeats or not."""
    interval: float = 0.0
    """The heartbeat interval the hub last asked of it (`capacity`); 0: the configured one."""
    relay: str | None = None
    """The relay it polls through (`hub_relays.HubRelays`), None when it polls the hub itself."""

    def heard_from(self, request: PollRequest, now: float) -> None:
        """A heartbeat: the probe is alive (unless its node is gone), and this is its latest
        progress and summaries."""
        self.last_seen = now
        self.state = ProbeState.DEAD if self.reason else ProbeState.ALIVE
        self.progress = request.progress
        self.dropped_events = request.dropped_events
        summaries = request.summaries
        self.summaries = summaries if isinstance(summaries, Summaries) else Summaries(summaries)

    def settle(self, process_exists: bool, now: float, dead_after: float) -> None:
        """After a liveness check: still silent means dead when the process is gone (from an
        early look on), else unresponsive past `dead_after`; a heartbeat meanwhile wins."""
        silent = now - self.last_seen
        if self.reason or silent <= dead_after * EARLY_LOOK:
            return
        if not process_exists:
            self.state = ProbeState.DEAD
        elif silent > dead_after:
            self.state = ProbeState.UNRESPONSIVE

    def status(self, summaries: Collection[str] | None = None) -> ProbeStatus:
        """Its row; with only the `summaries` named (all when None). A dead probe keeps all:
        its last words explain its death."""
        kept = self.summaries
        if summaries is not None and self.state != ProbeState.DEAD:
            kept = kept.only(summaries)
        return ProbeStatus(
            info=self.info,
            state=self.state,
            registered_at=self.registered_at,
            last_seen=self.last_seen,
            progress=self.progress,
            dropped_events=self.dropped_events,
            dropped_commands=self.mailbox.dropped,
            summaries=kept,
            reason=self.reason,
            relay=self.relay or "",
        )


class Registry:
    """Every probe the hub knows, by job and probe id."""

    def __init__(self, mailbox_size: int) -> None:
        self._mailbox_size = mailbox_size
        self._jobs: dict[str, dict[str, ProbeRecord]] = {}
        self._groups: dict[tuple[str, str], dict[str, tuple[int, ...]]] = {}
        """(job, worker group) -> process group name -> its global ranks, as probes sent them
        (`PollRequest.groups`): one rank list per group, not one per heartbeat."""

    def register(self, info: ProbeInfo, progress: Progress, now: float) -> None:
        """Add a probe, or refresh it (alive again, same mailbox and counters) when known."""
        probes = self._jobs.setdefault(info.context.job_id, {})
        record = probes.get(info.probe_id)
        if record is None:
            probes[info.probe_id] = ProbeRecord(
                info, now, now, progress, Mailbox(self._mailbox_size)
            )
        else:
            record.info, record.last_seen, record.progress = info, now, progress
            record.state = ProbeState.DEAD if record.reason else ProbeState.ALIVE

    def find(self, probe_id: str) -> ProbeRecord | None:
        for probes in self._jobs.values():
            if probe_id in probes:
                return probes[probe_id]
        return None

    def records(self, job_id: str | None) -> list[ProbeRecord]:
        """The job's probes, or every job's when `job_id` is None."""
        if job_id is not None:
            return list(self._jobs.get(job_id, {}).values())
        return [r for probes in self._jobs.values() for r in probes.values()]

    def targets(self, job_id: str | None, probe_ids: list[str] | None) -> list[ProbeRecord]:
        """The probes a command goes to: not dead, and among `probe_ids` when given."""
        wanted = None if probe_ids is None else set(probe_ids)
        return [
            r
            for r in self.records(job_id)
            if r.state != ProbeState.DEAD and (wanted is None or r.info.probe_id in wanted)
        ]

    def learn_groups(self, record: ProbeRecord, groups: dict[str, tuple[int, ...]]) -> None:
        """Keep the process groups a probe sent under its job and worker group (the newest
        rank list of a name wins; at most MAX_GROUPS names)."""
        ctx = record.info.context
        known = self._groups.setdefault((ctx.job_id, ctx.group or ""), {})
        for name, ranks in groups.items():
            if name in known or len(known) < MAX_GROUPS:
                known[name] = tuple(ranks)

    def groups(self, job_id: str) -> dict[str, dict[str, tuple[int, ...]]]:
        """The job's process groups by worker group ("" when none): name -> global ranks."""
        return {g: dict(known) for (j, g), known in self._groups.items() if j == job_id}

    def job_ids(self) -> tuple[str, ...]:
        return tuple(self._jobs)

    def to_check(self, now: float, dead_after: float, interval: float = 0.0) -> list[ProbeRecord]:
        """Probes silent for over `dead_after`, or looked for once early (`EARLY_LOOK`), not
        dead and not being checked yet; for a probe asked to heartbeat slower than the
        configured `interval`, `dead_after` in proportion.

        Each one returned is marked as being checked; the caller clears `checking` when done.
        """
        found = []
        for record in self.records(None):
            if record.state == ProbeState.DEAD or record.checking:
                continue
            limit = dead_after_for(record.interval, interval, dead_after)
            silent = now - record.last_seen
            early = silent > limit * EARLY_LOOK and record.looked_early_at != record.last_seen
            if silent > limit or early:
                record.checking = True
                record.looked_early_at = record.last_seen
                found.append(record)
        return found

    def live_count(self) -> int:
        """Probes not dead: the ones that heartbeat."""
        return sum(1 for r in self.records(None) if r.state != ProbeState.DEAD)

    def live_node_ids(self) -> set[str]:
        """The nodes of the probes not dead yet: the ones a node sweep has to look at."""
        return {
            r.info.context.node_id
            for r in self.records(None)
            if r.state != ProbeState.DEAD and r.info.context.node_id
        }

    def mark_nodes_gone(self, dead_nodes: dict[str, str]) -> list[ProbeRecord]:
        """Probes on a node of `dead_nodes` (node id -> why Ray declared it dead) become dead
        for good with the reason "node gone: <why>"; returns the ones marked now."""
        marked = []
        for record in self.records(None):
            why = dead_nodes.get(record.info.context.node_id)
            if why is not None and not record.reason:
                record.reason = f"node gone: {why}"
                record.state = ProbeState.DEAD
                marked.append(record)
        return marked

    def forget_oldest_dead(self, keep: int = MAX_DEAD_RECORDS) -> None:
        """Drop dead probes beyond `keep`, those silent the longest first."""
        dead = [
            (r.last_seen, job, r.info.probe_id)
            for job, probes in self._jobs.items()
            for r in probes.values()
            if r.state == ProbeState.DEAD
        ]
        for _, job, probe_id in sorted(dead)[: max(0, len(dead) - keep)]:
            del self._jobs[job][probe_id]
