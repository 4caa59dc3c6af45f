"""Taking this process's stacks from the probe thread: `sys._current_frames()`, no pause."""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
import time
from functools import lru_cache
from types import FrameType
from typing import Any

from rankscope.runtime.probe import OWN_THREAD_PREFIX, register_handler
from rankscope.stacks.model import (
    ChildProcess,
    Frame,
    ThreadStack,
    TimeShares,
    active_thread,
    user_place,
)

_RANKSCOPE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_USER_CODE_INSIDE_RANKSCOPE = (os.path.join(_RANKSCOPE_DIR, "demo"),)


def capture_threads(skip_own: bool = True) -> tuple[ThreadStack, ...]:
    """Stacks of every Python thread in this process (rankscope's own left out), innermost first."""
    names = {t.ident: t for t in threading.enumerate()}
    main_ident = threading.main_thread().ident
    stacks = []
    for ident, top in sys._current_frames().items():
        thread = names.get(ident)
        name = thread.name if thread is not None else f"thread-{ident}"
        if skip_own and name.startswith(OWN_THREAD_PREFIX):
            continue
        stacks.append(ThreadStack(name, ident, ident == main_ident, walk(top)))
    stacks.sort(key=lambda s: (not s.is_main, s.thread_name))
    return tuple(stacks)


def spacing_wait(last: float | None, apart_s: float, now: float) -> float:
    """Seconds to wait before a look that should come `apart_s` after the one taken at `last`
    (monotonic; None: no look yet): never more than `apart_s`, nothing once it has passed."""
    if last is None or apart_s <= 0:
        return 0.0
    return max(0.0, min(apart_s, last + apart_s - now))


class LookSpacing:
    """When this process last answered `stacks`, so that a confirming look is taken at least
    `apart_s` after it, counted on this process's own clock: the CLI need not wait a fixed
    time after its first look ends, when at 4,096 ranks most were taken a second before."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: float | None = None

    def capture(self, apart_s: float) -> tuple[ThreadStack, ...]:
        """The stacks, taken `apart_s` (at most) after the previous look's, or now."""
        with self._lock:
            last = self._last
        time.sleep(spacing_wait(last, apart_s, time.monotonic()))
        stacks = capture_threads()
        with self._lock:
            self._last = time.monotonic()
        return stacks


_looks = LookSpacing()


@register_handler("stacks")
def _stacks_command(args: dict[str, Any]) -> tuple[ThreadStack, ...]:
    return _looks.capture(float(args.get("apart_s", 0.0)))


SAMPLE_INTERVAL_S = 0.01
MAX_SAMPLE_S = 1.5
"""A sampling stays within the probe's budget for a heavy handler (`Config.handler_budget`)."""


@register_handler("samples", off_thread=True)
def _samples_command(args: dict[str, Any]) -> TimeShares:
    return sample_places(min(MAX_SAMPLE_S, float(args.get("seconds", 1.0))))


def sample_places(seconds: float, interval_s: float = SAMPLE_INTERVAL_S) -> TimeShares:
    """Where the active thread is, every `interval_s` for `seconds`: a straggler's profile,
    whose odd place (compared with its peers') is where its extra time goes."""
    counts: dict[str, int] = {}
    samples = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        thread = active_thread(capture_threads())
        place = user_place(thread.frames) if thread is not None else None
        if place is not None:
            counts[place] = counts.get(place, 0) + 1
        samples += 1
        time.sleep(interval_s)
    ranked = tuple(sorted(counts.items(), key=lambda kv: -kv[1]))
    return TimeShares(seconds, samples, ranked)


MAX_CHILDREN = 32
"""Child processes listed at most: an engine's workers, not a fork bomb."""


@register_handler("children")
def _children_command(args: dict[str, Any]) -> tuple[ChildProcess, ...]:
    return child_processes()


def child_processes() -> tuple[ChildProcess, ...]:
    """Processes this one started (vLLM/SGLang engines, DataLoader workers): the setup hook
    never reaches them, so `rankscope stacks` takes theirs with py-spy."""
    import psutil

    found = []
    for child in psutil.Process().children(recursive=True)[:MAX_CHILDREN]:
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            found.append(ChildProcess(child.pid, child.name()))
        except psutil.Error:  # gone meanwhile
            continue
    return tuple(found)


def walk(frame: FrameType | None) -> tuple[Frame, ...]:
    frames = []
    while frame is not None:
        code = frame.f_code
        frames.append(
            Frame(code.co_name, code.co_filename, frame.f_lineno, is_library(code.co_filename))
        )
        frame = frame.f_back
    return tuple(frames)


@lru_cache(maxsize=4096)
def is_library(filename: str) -> bool:
    """Not the user's code: the standard library, installed packages, rankscope's machinery."""
    path = os.path.abspath(filename)
    if filename.startswith("<"):
        return filename.startswith("<frozen")
    if path.startswith(_USER_CODE_INSIDE_RANKSCOPE):
        return False
    return path.startswith(_library_roots())


@lru_cache(maxsize=4096)
def is_stdlib(filename: str) -> bool:
    """Python's own standard library (frozen modules included), not an installed package."""
    if filename.startswith("<"):
        return filename.startswith("<frozen")
    path = os.path.abspath(filename)
    return path.startswith(_stdlib_roots()) and "-packages" not in path


@lru_cache(maxsize=1)
def _stdlib_roots() -> tuple[str, ...]:
    return tuple(
        sorted({os.path.abspath(sysconfig.get_paths()[k]) for k in ("stdlib", "platstdlib")})
    )


@lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    keys = ("purelib", "platlib")
    roots = {*_stdlib_roots(), *(os.path.abspath(sysconfig.get_paths()[k]) for k in keys)}
    roots.update(p for p in sys.path if "site-packages" in p or "dist-packages" in p)
    roots.add(_RANKSCOPE_DIR)
    return tuple(sorted(roots))
