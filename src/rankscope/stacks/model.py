"""Stack records shared by the probe (capture), py-spy (fallback) and the analysis."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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
