"""One way to ask the ranks: choose a job's processes, send them one or several commands in
one round trip, and sort what comes back.

Every feature's `collect.py` asks its ranks through `ask`: it skips the dead (they are named,
not asked), sends every command together (`HubClient.together`: a probe gets them in one poll,
a relay in one call), waits up to the command's deadline (`runtime.deadlines`), and returns per
command the answers, the ranks that answered with an error (or with a payload of another type
than expected), the ranks silent past the deadline, and the dead. What a feature does with the
unanswered (py-spy them, list them) stays its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rankscope.ranks import parse_rank_spec
from rankscope.runtime.protocol import CommandResult, FanOutResult, ProbeState, ProbeStatus
from rankscope.runtime.selection import filter_jobs_by_group, filter_ranks

if TYPE_CHECKING:
    from rankscope.runtime.client import HubClient

__all__ = ["Answers", "Command", "Selection", "ask", "ask_one", "select", "sort_answers"]

UNEXPECTED = "unexpected reply"
"""The error of an answer whose payload is not of the type the command expects."""


@dataclass(frozen=True)
class Selection:
    """Which processes a command is about: `--job` (else the live jobs, else the latest one),
    `--group` (it may also pick the job) and `--ranks`. A bad rank spec fails as the
    selection is made, before Ray."""

    job: str | None = None
    group: str | None = None
    ranks: str | None = None
    """`--ranks` as the user gave it ("0-3,7"), for messages."""
    wanted: frozenset[int] | None = field(init=False, default=None)
    """The ranks `ranks` names; None: every process."""

    def __post_init__(self) -> None:
        if self.ranks is not None:
            object.__setattr__(self, "wanted", parse_rank_spec(self.ranks))


@dataclass(frozen=True)
class Command:
    """One probe command: its kind, its arguments, and the payload type a good answer has
    (None: any; an answer of another type counts as failed, `UNEXPECTED`)."""

    kind: str
    args: dict[str, Any] | None = None
    expect: type | None = None


@dataclass(frozen=True)
class Answers:
    """One command's outcome over the processes asked."""

    kind: str
    answered: tuple[tuple[ProbeStatus, CommandResult], ...]
    """The ranks that answered, in the order their answers came."""
    failed: tuple[tuple[ProbeStatus, str], ...]
    """The ranks that answered with an error (or an unexpected payload), and the error."""
    silent: tuple[ProbeStatus, ...]
    """The live ranks that did not answer within the deadline."""
    dead: tuple[ProbeStatus, ...]
    """The ranks the hub knows dead: not asked."""
    deadline_s: float | None = None
    asked: tuple[ProbeStatus, ...] = field(default=(), repr=False)
    """The live ranks asked."""

    def payloads(self) -> dict[str, Any]:
        """The answers' payloads by probe id."""
        return {status.info.probe_id: reply.payload for status, reply in self.answered}

    def unanswered(
        self, failed: str = "{error}", silent: str = "no answer in time"
    ) -> list[tuple[ProbeStatus, str]]:
        """The failed ranks, then the silent ones, each with why, in the caller's words:
        `failed` formats `{error}`, `silent` formats `{deadline}` (`:g`)."""
        late = silent.format(deadline=f"{self.deadline_s or 0:g}")
        return [(s, failed.format(error=e)) for s, e in self.failed] + [
            (s, late) for s in self.silent
        ]


def select(
    client: HubClient, selection: Selection, summaries: list[str] | None = None
) -> dict[str, list[ProbeStatus]]:
    """The selected jobs' registered processes, by job (`--ranks` applied: a job none of whose
    processes has those ranks keeps an empty list). `summaries`: the heartbeat summaries a live
    row keeps (all when None; [] for none, which at 4,096 ranks saves megabytes)."""
    jobs = filter_jobs_by_group(client.jobs(selection.job, summaries), selection.group)
    if selection.wanted is None:
        return jobs
    return {job_id: filter_ranks(probes, selection.wanted) for job_id, probes in jobs.items()}


def ask(
    client: HubClient,
    probes: Sequence[ProbeStatus],
    commands: Sequence[Command],
    deadline_s: float | None,
) -> tuple[Answers, ...]:
    """Ask the live `probes` every command in one round trip, wait up to `deadline_s` (None:
    the hub's own), and sort the replies; one `Answers` per command, in order."""
    live = [p for p in probes if p.state != ProbeState.DEAD]
    dead = tuple(p for p in probes if p.state == ProbeState.DEAD)
    if not live:
        empty = FanOutResult((), ())
        return tuple(sort_answers(c, live, dead, empty, deadline_s) for c in commands)
    with client.together():
        started = [
            client.start_fan_out(c.kind, live, args=c.args, deadline_s=deadline_s) for c in commands
        ]
    return tuple(
        sort_answers(c, live, dead, result(), deadline_s)
        for c, result in zip(commands, started, strict=True)
    )


def ask_one(
    client: HubClient, probes: Sequence[ProbeStatus], command: Command, deadline_s: float | None
) -> Answers:
    """`ask` with one command."""
    [answers] = ask(client, probes, [command], deadline_s)
    return answers


def sort_answers(
    command: Command,
    live: Sequence[ProbeStatus],
    dead: tuple[ProbeStatus, ...],
    result: FanOutResult,
    deadline_s: float | None,
) -> Answers:
    """A fan-out's replies as answers, failures and silence (pure)."""
    by_id = {p.info.probe_id: p for p in live}
    answered: list[tuple[ProbeStatus, CommandResult]] = []
    failed: list[tuple[ProbeStatus, str]] = []
    for reply in result.replies:
        status = by_id.get(reply.probe_id)
        if status is None:
            continue
        if not reply.ok:
            failed.append((status, reply.error or UNEXPECTED))
        elif command.expect is not None and not isinstance(reply.payload, command.expect):
            failed.append((status, UNEXPECTED))
        else:
            answered.append((status, reply))
    return Answers(
        command.kind,
        tuple(answered),
        tuple(failed),
        tuple(result.missing),
        dead,
        deadline_s,
        tuple(live),
    )
