"""Ctrl-C for the CLI's commands that refresh until interrupted (`memory --watch`, `logs --follow`):
it always ends them, within seconds.

Python raises a SIGINT as a KeyboardInterrupt in the main thread, at its next Python instruction,
and there a loop cannot always act on it. A call blocked in C (a synchronous query of Ray's GCS,
a write to a full pipe) runs no Python until it returns, so the exception waits for it; and
inside Ray's calls the exception can come back as another one (Cython reports an exception raised
under a call that returned a value as a SystemError), which a broad `except Exception` takes for
a failed call. A loop that only caught KeyboardInterrupt could run on 30 s and more after the
Ctrl-C (seen under load: the CLI blocked in the hub-state query of `HubClient._get`, and a
`memory --watch` still printing after the test's Ctrl-C).

`until_interrupted()` keeps Python's KeyboardInterrupt (it still cuts a wait short) and learns of
the signal itself as well, on a thread of its own, from the byte Python's C-level handler writes
to its wakeup fd (`signal.set_wakeup_fd`) the moment the signal arrives, whatever the main thread
is doing. Then the Ctrl-C is remembered (`interrupted()`, which the loop asks every round, whatever
became of the exception), and the process has `GRACE_S` to wind down; past that, or at a second
Ctrl-C, it leaves at once with 130, the shell's code for Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType

__all__ = ["GRACE_S", "interrupted", "until_interrupted"]

GRACE_S = 10.0
"""After a Ctrl-C, the longest a loop may take to end before the process leaves without it."""
EXIT_INTERRUPTED = 130
_SIGINT = bytes([signal.SIGINT])
_STOP = b"\0"
"""Written by `until_interrupted` itself when the loop ended: no signal has the number 0."""

_state = {"interrupted": False}


def interrupted() -> bool:
    """Whether Ctrl-C was pressed inside `until_interrupted()`."""
    return _state["interrupted"]


@contextlib.contextmanager
def until_interrupted() -> Iterator[None]:
    """A loop that runs until Ctrl-C: see the module's docstring. The Ctrl-C ends the block
    quietly, as does any error raised once it came (Ray's calls may turn the KeyboardInterrupt
    into one). Outside the main thread (where Python takes no signal) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        _state["interrupted"] = True  # at once, before Ray's calls can turn the exception
        raise KeyboardInterrupt

    _state["interrupted"] = False
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)  # the C-level handler must never block on it
    watcher = threading.Thread(target=_watch, args=(read_end,), name="rankscope-ctrl-c")
    watcher.daemon = True
    watcher.start()
    previous_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    except KeyboardInterrupt:
        pass  # the Ctrl-C that ends the loop
    except Exception:
        if not _state["interrupted"]:
            raise  # else the Ctrl-C, come back out of Ray's calls as another error
    finally:
        if previous is not None:  # None: set outside Python, cannot be put back
            signal.signal(signal.SIGINT, previous)
        signal.set_wakeup_fd(previous_fd)
        os.write(write_end, _STOP)
        watcher.join()
        os.close(read_end)
        os.close(write_end)


def _watch(read_end: int) -> None:
    """Learn of a Ctrl-C as it arrives; from then on give the loop `GRACE_S` to end."""
    deadline: float | None = None
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not select.select([read_end], [], [], left)[0]:
            os._exit(EXIT_INTERRUPTED)  # the loop did not end in time: leave without it
        got = os.read(read_end, 64)
        if _STOP in got:  # the loop ended
            return
        if _SIGINT in got:
            if deadline is not None:  # a second Ctrl-C: the user does not want to wait
                os._exit(EXIT_INTERRUPTED)
            _state["interrupted"] = True
            deadline = time.monotonic() + GRACE_S
