"""Is this process working, or waiting for work? The watchdog asks before a no-step report.

A Ray worker between calls sits in Ray's task loop (`main_loop` in ray/_private/worker.py) with
nothing above it: an RL trainer's workers wait there for minutes while rollout runs elsewhere.
That is waiting, not hanging. A process works when some thread (not only the main one: Ray Train
runs the training function in a thread of its own) is in user code, inside a torch.distributed
call, or running a Ray task (library code too: verl installed in site-packages is library code).

Ray's own answer cannot be used: `ray.get_runtime_context().get_task_id()` is per thread, and
from any thread but the one running the task it returns a fixed id of that thread's own (Ray
2.60: the same id while the actor idles and while its main thread runs a method), never the
running task's. Pure: stacks and the recorder's call in flight in, a sentence out.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from rankscope.hang.model import CollectiveRecord
from rankscope.stacks.model import COLLECTIVE_PATH, Frame, ThreadStack, headline

RAY_TASK_LOOP = ("main_loop", os.path.join("ray", "_private", "worker.py"))
"""Where a Ray worker's main thread waits for its next task (the C++ loop runs under it)."""
RAY_TASK_RUNNER = ("actor_method_executor", os.path.join("ray", "_private", "function_manager.py"))
"""The frame under every actor method, also on a threaded actor's pool threads."""
_TASK_FRAMES = frozenset((RAY_TASK_LOOP[0], RAY_TASK_RUNNER[0]))

WORK = ("in torch.distributed", "in user code", "running a Ray task")
"""What a thread can be busy with, most telling first."""


def find_work(threads: Sequence[ThreadStack], in_flight: CollectiveRecord | None) -> str | None:
    """What keeps this process busy, in one line; None when it only waits for work.

    `threads` as `stacks.capture_threads()` takes them (rankscope's own threads left out),
    `in_flight` the recorder's oldest torch.distributed call still running. The main thread
    wins ties.
    """
    if in_flight is not None:
        return f"in {in_flight.op} #{in_flight.seq} of group {in_flight.group} ({in_flight.caller})"
    best: tuple[int, ThreadStack] | None = None
    for thread in sorted(threads, key=lambda t: not t.is_main):
        kind = work_of(thread.frames)
        if kind is not None and (best is None or kind < best[0]):
            best = (kind, thread)
            if kind == 0:
                break
    if best is None:
        return None
    kind, thread = best
    return f"thread {thread.thread_name} {WORK[kind]}, at {headline(thread.frames)}"


def work_of(frames: Sequence[Frame]) -> int | None:
    """The thread's work as an index into WORK, None when it waits; one pass, innermost first.

    Running a Ray task: frames above Ray's task loop (the loop innermost is a worker waiting for
    its next task), or an actor method's runner under them (threaded actors' pool threads).
    """
    user = task = False
    for depth, frame in enumerate(frames):
        if COLLECTIVE_PATH in frame.filename:
            return 0
        if not frame.library:
            user = True
        elif not task and frame.function in _TASK_FRAMES:
            task = _is(frame, RAY_TASK_RUNNER) or (_is(frame, RAY_TASK_LOOP) and depth > 0)
    return 1 if user else 2 if task else None


def _is(frame: Frame, where: tuple[str, str]) -> bool:
    return frame.function == where[0] and frame.filename.endswith(where[1])
