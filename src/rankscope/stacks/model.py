"""Stack records shared by the probe (capture), py-spy (fallback) and the analysis, and the
report `rankscope stacks` prints (`StackReport`, also its `--json`)."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rankscope.ranks import format_ranks
from rankscope.runtime.protocol import ProbeStatus


@dataclass(frozen=True)
class Frame:
    function: str
    filename: str
    lineno: int
    library: bool
    """True for the standard library, site-packages, Ray and rankscope's own machinery."""

    @property
    def location(self) -> str:
        return f"{os.path.basename(self.filename)}:{self.lineno}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_interned_frame, (self.function, self.filename, self.lineno, self.library))


@functools.lru_cache(maxsize=1 << 16)
def _interned_frame(function: str, filename: str, lineno: int, library: bool) -> Frame:
    """An unpickled frame, built once however many ranks' stacks hold it: 4,096 ranks share
    a few hundred frames, so their stacks unpickle several times faster."""
    return Frame(function, filename, lineno, library)


@dataclass(frozen=True)
class ThreadStack:
    thread_name: str
    thread_id: int
    is_main: bool
    frames: tuple[Frame, ...]
    """Innermost call first, as py-spy and `rankscope stacks` print them."""


@dataclass(frozen=True)
class ProcessStacks:
    """Every thread of one registered process, or why they could not be taken."""

    status: ProbeStatus
    threads: tuple[ThreadStack, ...]
    source: str
    """`probe` (answered itself), `py-spy` (taken from outside), or `none` (both failed)."""
    error: str = ""
    parent: ProbeStatus | None = None
    """For a child process the setup hook never reached: the probed process that started it
    (`status` is then the parent's, with the child's pid and name)."""
    taken_at: float | None = None
    """When the probe took them, on its own clock (its `status.progress` is from then too);
    None for py-spy's, whose progress is the registry's."""


@dataclass(frozen=True)
class ChildProcess:
    """A process a probed worker started (a vLLM engine, a DataLoader worker)."""

    pid: int
    name: str


@dataclass(frozen=True)
class TimeShares:
    """Where one process's active thread spent a stretch of wall time: its innermost user frame
    (`function file.py:LINE`) sampled every few milliseconds, the places most seen first."""

    seconds: float
    samples: int
    places: tuple[tuple[str, int], ...]
    """(place, samples there)."""

    def share(self, place: str) -> float:
        return dict(self.places).get(place, 0) / self.samples if self.samples else 0.0


def user_place(frames: Sequence[Frame]) -> str | None:
    """The innermost user frame, `function file.py:LINE`; None when the stack is all library
    (a thread idle in Ray's loop)."""
    user = next((f for f in frames if not f.library), None)
    return f"{user.function} {user.location}" if user is not None else None


def headline(frames: Sequence[Frame]) -> str:
    """The innermost call, and the user's frame that led there when they differ."""
    if not frames:
        return "(no Python frames)"
    inner = frames[0]
    user = next((f for f in frames if not f.library), None)
    if user is None:
        return f"{inner.function} {inner.location}"
    if user is inner:
        return f"{user.function} {user.location}"
    return f"{inner.function} <- {user.function} {user.location}"


COLLECTIVE_PATH = f"torch{os.sep}distributed{os.sep}"


def active_thread(threads: Sequence[ThreadStack]) -> ThreadStack | None:
    """The thread that says where a process is: the one in a collective, else in user code.

    Ray Train runs the training function in its own thread while the main thread idles in
    Ray's task loop, so the main thread alone would say "main_loop worker.py" for a rank that
    is stuck in user code elsewhere. The main thread wins ties; it is the answer when no
    thread is busy.
    """
    if not threads:
        return None
    ordered = sorted(threads, key=lambda t: not t.is_main)
    for busy in (_in_collective, _in_user_code):
        found = next((t for t in ordered if busy(t)), None)
        if found is not None:
            return found
    return ordered[0]


def in_collective(frames: Sequence[Frame]) -> bool:
    """True when the stack is inside a torch.distributed call."""
    return any(COLLECTIVE_PATH in f.filename for f in frames)


def _in_collective(thread: ThreadStack) -> bool:
    return in_collective(thread.frames)


def _in_user_code(thread: ThreadStack) -> bool:
    return any(not f.library for f in thread.frames)


@dataclass(frozen=True)
class StackMember:
    """One thread of one process that has a group's stack."""

    rank: int | None
    pid: int
    hostname: str
    node_id: str
    actor_class: str | None
    thread_name: str
    source: str
    unresponsive: str = ""
    """Why the probe did not answer, when the stack came from py-spy instead."""
    group: str | None = None
    """The group of ranks the process belongs to (its rendezvous `host:port`)."""
    active: bool = False
    """This thread says where its process is: in a collective, else in user code, else main."""
    step: int = 0
    """The process's `rankscope.step()` count."""
    since_step_s: float | None = None
    """Seconds since its last `rankscope.step()`; None when it never called it."""
    parent: str = ""
    """For a child process (an engine a rank started): its parent's label, `rank 2`."""
    waited_s: float | None = None
    """How long its oldest collective call had run when its probe took the stacks (its
    recorder's); None when none ran, nothing records, or the stacks are py-spy's."""


@dataclass(frozen=True)
class StackGroup:
    headline: str
    """Where they are, in one line: `all_reduce <- train_step train.py:88`."""
    frames: tuple[Frame, ...]
    members: tuple[StackMember, ...]
    main_thread: bool
    """True when this stack is some process's main thread (where training code runs)."""

    @property
    def idle(self) -> bool:
        """No user frame: an idle Ray worker loop, a parked pool thread, library machinery."""
        return all(f.library for f in self.frames)

    @property
    def label(self) -> str:
        """`ranks 0-2,4-7`, `rank 3`, or pids for processes with no rank."""
        return label_members(self.members)

    @property
    def process_count(self) -> int:
        return len({(m.node_id, m.pid) for m in self.members})


@dataclass(frozen=True)
class Unanswered:
    """A process whose stacks could not be taken by its probe nor by py-spy."""

    rank: int | None
    pid: int
    hostname: str
    reason: str


@dataclass(frozen=True)
class StackFinding:
    """Ranks of one group stuck where they are while another rank of the group is elsewhere."""

    group: str | None
    """The group of ranks (its rendezvous `host:port`), None when the ranks did not say."""
    waiting: tuple[int, ...]
    """The ranks waiting: in a collective, or stalled (no step for `analysis.PROGRESS_WINDOW_S`)."""
    where: str
    """Where they wait: `all_reduce <- train_step train.py:88`."""
    elsewhere: tuple[int, ...]
    """The ranks of the same group that are somewhere else: the ones to look at."""
    message: str
    """`ranks 0-2 wait in all_reduce <- ...; rank 3 is elsewhere: load_batch data.py:41`."""


@dataclass(frozen=True)
class StackReport:
    job_id: str
    groups: tuple[StackGroup, ...]
    unanswered: tuple[Unanswered, ...]
    process_count: int
    findings: tuple[StackFinding, ...] = ()
    """Groups of ranks stuck waiting for a rank that is elsewhere (exit code 1)."""
    looks: int = 1
    """2 when the first look's findings were looked at again (`confirmed`): their waiting
    ranks' recorders did not say they had waited `analysis.LONG_WAIT_S`."""

    @property
    def ok(self) -> bool:
        return not self.findings


def label_members(members: Sequence[StackMember]) -> str:
    ranks = {m.rank for m in members if m.rank is not None}
    parts = []
    if ranks:
        parts.append(f"{'rank' if len(ranks) == 1 else 'ranks'} {format_ranks(ranks)}")
    no_rank = sorted({(m.parent, m.hostname, m.pid) for m in members if m.rank is None})
    parts.extend(
        f"{parent}'s child pid {pid}" if parent else f"pid {pid}@{host}"
        for parent, host, pid in no_rank
    )
    return "; ".join(parts)
