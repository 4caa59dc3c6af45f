"""The collective recorder: every torch.distributed call, per process group, in a ring buffer.

The public functions of `torch.distributed` are replaced by thin wrappers (the namespace user
code and libraries call through), so any backend is seen: gloo, nccl, others. Sequence numbers
come from the process group's own counter when torch keeps one, so ranks stay aligned even when
a probe started late; otherwise from a counter of ours per group. Async work is completed when
its `wait()` returns. The wrapper costs about a microsecond and never changes what the call
does or raises. Switched live to the level `off`, it only calls through (torch's sequence
numbers stay aligned; our own per-group counters, p2p's, skip the calls made meanwhile).

With NCCL (any backend whose work runs asynchronously on a device), the Python call returns as
soon as the work is enqueued: a collective stuck on the GPU would look completed. For those the
recorder records a CUDA event on the current stream after the call and marks the call completed
only when `event.query()` turns true, polled from the probe and watchdog threads (never
synchronizing the training stream).
"""

from __future__ import annotations

import collections
import contextlib
import importlib.abc
import importlib.machinery
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from rankscope import level as _level
from rankscope.hang.model import (
    CallState,
    CollectiveRecord,
    RecorderSnapshot,
    caller_text,
    dtype_names,
    error_text,
    new_record,
    plain_shapes,
)
from rankscope.runtime.api import send_last_words

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "monitored_barrier",
    "all_gather_object",
    "broadcast_object_list",
    "gather_object",
    "scatter_object_list",
)
POINT_TO_POINT = ("send", "recv", "isend", "irecv", "batch_isend_irecv")
DEFAULT_CAPACITY = 2000
DEVICE_BACKENDS = ("nccl",)
"""Backends whose collectives complete on the GPU after the Python call returns."""


def _cuda_event() -> Any:
    import torch

    event = torch.cuda.Event()
    event.record()  # on the current stream, where the collective's work was enqueued
    return event


class _Entry:
    """One slot of the ring, rewritten in place for every call (no garbage per call)."""

    __slots__ = (
        "caller",
        "device",
        "dtypes",
        "end",
        "error",
        "generation",
        "group",
        "op",
        "p2p",
        "pending",
        "seq",
        "shapes",
        "start",
        "state",
    )

    group: str
    seq: int
    op: str
    p2p: bool
    shapes: tuple[Any, ...]
    dtypes: tuple[Any, ...]
    caller: tuple[str, int]
    start: float
    end: float | None
    state: CallState
    error: str
    device: bool
    """The group's work completes on a device (NCCL), after the Python call returns."""
    pending: Any
    """The device event that completes this call, while it has not fired."""

    def __init__(self) -> None:
        self.generation = -1
        """Which call (the recorder's running count) this slot holds now."""

    def finish(self, state: CallState, generation: int) -> None:
        if self.generation == generation:  # not yet reused by a later call
            self.end = time.time()
            self.state = state

    def fail(self, exc: BaseException, generation: int) -> None:
        """The call raised: keep the backend's reason, it names the peer that went away."""
        if self.generation == generation:
            self.end = time.time()
            self.state = CallState.FAILED
            self.error = error_text(exc)

    def freeze(self) -> CollectiveRecord:
        return new_record(  # a drain freezes thousands: see new_record
            self.group, self.seq, self.op, plain_shapes(self.shapes), dtype_names(self.dtypes),
            self.start, self.end, self.state, caller_text(self.caller), self.p2p, self.error,
        )  # fmt: skip


class CollectiveRecorder:
    """The ring buffer and the per-group bookkeeping; one per process.

    The ring's slots are allocated once and rewritten in place: recording creates no
    long-lived objects, so it never makes the garbage collector walk a large heap.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._ring = [_Entry() for _ in range(capacity)]
        self.total = 0
        """Calls recorded since the start (the ring keeps the last `capacity`)."""
        self._groups: dict[int, tuple[str, tuple[int, ...], Any, bool]] = {}
        self._own_seq: dict[str, int] = collections.defaultdict(int)
        self._pending: collections.deque[tuple[_Entry, int]] = collections.deque()
        self.device_backends: tuple[str, ...] = DEVICE_BACKENDS
        """Backends whose work completes on a device after the call returns."""
        self.make_event: Callable[[], Any] = _cuda_event
        """An event recorded on the current stream now; `.query()` is True once it fired."""

    def returned(self, entry: _Entry, generation: int) -> None:
        """The Python call returned: done, or for device backends, done when its event fires."""
        if entry.generation != generation:
            return
        if entry.device:
            try:
                entry.pending = self.make_event()
                self._pending.append((entry, generation))
                return
            except Exception:  # no usable device event: the host's view is all we have
                entry.pending = None
        entry.end = time.time()
        entry.state = CallState.COMPLETED

    def poll(self) -> None:
        """Complete the device calls whose events fired; never waits on the device."""
        for _ in range(len(self._pending)):
            entry, generation = self._pending.popleft()
            if entry.generation != generation or entry.state is not CallState.STARTED:
                continue  # reused for a later call, or failed meanwhile
            try:
                fired = bool(entry.pending.query())
            except Exception:
                fired = False
            if fired:
                entry.end, entry.state, entry.pending = time.time(), CallState.COMPLETED, None
            else:
                self._pending.append((entry, generation))

    def begin(
        self, op: str, p2p: bool, group: Any, tensors: Sequence[Any], caller: tuple[str, int]
    ) -> tuple[_Entry, int]:
        """Record a call as started; returns its slot and generation for `finish`."""
        known = self._groups.get(id(group))
        if known is None:
            known = self._groups[id(group)] = self._describe(group)
        name, _, pg, device = known
        if p2p:
            seq = self._own_counter(f"{name}/p2p")
        else:
            try:  # torch's own counter: aligned across ranks even if we started late
                seq = pg._get_sequence_number_for_group() + 1
            except Exception:
                seq = self._own_counter(name)
        if len(tensors) == 1:  # the common case, without building generators
            shapes, dtypes = (tensors[0].shape,), (tensors[0].dtype,)
        else:
            shapes = tuple([t.shape for t in tensors])
            dtypes = tuple([t.dtype for t in tensors])
        generation = self.total
        entry = self._ring[generation % self.capacity]
        entry.generation = -1  # torn while rewritten: snapshots skip it
        entry.group, entry.seq, entry.op, entry.p2p = name, seq, op, p2p
        entry.shapes, entry.dtypes, entry.caller = shapes, dtypes, caller
        entry.start, entry.end, entry.state = time.time(), None, CallState.STARTED
        entry.error, entry.device, entry.pending = "", device, None
        entry.generation = generation
        self.total = generation + 1
        return entry, generation

    def _ordered(self, last: int | None = None) -> list[_Entry]:
        """Filled slots, oldest first (the last `last` of them when given)."""
        count = min(self.total, self.capacity)
        if last is not None:
            count = min(count, last)
        first = self.total - count
        slots = [self._ring[i % self.capacity] for i in range(first, self.total)]
        return [e for e in slots if e.generation >= first]

    def snapshot(self, last: int | None = None) -> RecorderSnapshot:
        """The ring buffer (only its `last` calls when given), frozen for sending."""
        self.poll()
        entries = self._ordered(last)
        dropped = max(0, self.total - self.capacity)
        return RecorderSnapshot(
            records=tuple(e.freeze() for e in entries),
            groups={name: ranks for name, ranks, _, _ in self._groups.values()},
            dropped=dropped,
            recording=_installed is not None,
            paused=not _level.RECORDING,
        )

    def in_flight(self, older_than: float) -> CollectiveRecord | None:
        """The oldest call still running that started before `older_than` (for the watchdog)."""
        self.poll()
        for entry in self._ordered(last=16):
            if entry.state is CallState.STARTED and entry.start < older_than:
                return entry.freeze()
        return None

    def _describe(self, group: Any) -> tuple[str, tuple[int, ...], Any, bool]:
        import torch.distributed as dist

        pg = group if group is not None else dist.distributed_c10d._get_default_group()
        try:
            ranks = tuple(dist.get_process_group_ranks(pg))
        except Exception:
            ranks = ()
        try:
            backend = str(dist.get_backend(pg))
        except Exception:
            backend = ""
        device = any(b in backend for b in self.device_backends)
        return str(getattr(pg, "group_name", "") or id(pg)), ranks, pg, device

    def _own_counter(self, key: str) -> int:
        self._own_seq[key] += 1
        return self._own_seq[key]


class _RecordedWork:
    """Stands in for an async op's Work: completion is recorded when wait() returns."""

    def __init__(self, work: Any, entry: _Entry, generation: int) -> None:
        self._work, self._entry, self._generation = work, entry, generation

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        try:
            result = self._work.wait(*args, **kwargs)
        except BaseException as exc:
            self._entry.fail(exc, self._generation)
            raise
        _recorder.returned(self._entry, self._generation)
        return result

    def is_completed(self) -> bool:
        done = bool(self._work.is_completed())
        if done:
            self._entry.finish(CallState.COMPLETED, self._generation)
        return done

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


_recorder = CollectiveRecorder()
_installed: dict[str, Callable[..., Any]] | None = None
_install_lock = threading.Lock()


def collective_recorder() -> CollectiveRecorder:
    return _recorder


def oldest_call_start() -> float | None:
    """When this process's oldest collective call still running began (None: none runs). A
    probe's every answer carries it (`Progress.waiting_since`): `rankscope stacks` then knows
    how long a rank has waited in its collective from one look."""
    call = _recorder.in_flight(older_than=time.time())
    return None if call is None else call.start


def record_collectives() -> None:
    """Record every torch.distributed call in this process from now on (idempotent)."""
    import torch.distributed as dist

    _patch(dist)


def record_when_imported() -> None:
    """Record from the moment torch.distributed is imported (now, if it already is).

    Patching right after the import, before any user code can call a collective, keeps the
    ranks' own sequence counters aligned; workers that never import torch pay nothing.
    """
    module = sys.modules.get("torch.distributed")
    if module is not None:
        _patch(module)
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def stop_recording() -> None:
    """Put the original functions back (tests and benchmarks)."""
    global _installed
    with _install_lock:
        module = sys.modules.get("torch.distributed")
        if _installed is None or module is None:
            return
        for name, original in _installed.items():
            setattr(module, name, original)
        _installed = None


def _patch(dist: ModuleType) -> None:
    global _installed
    with _install_lock:
        if _installed is not None or not dist.is_available():
            return
        originals: dict[str, Callable[..., Any]] = {}
        for name in (*COLLECTIVES, *POINT_TO_POINT):
            fn = getattr(dist, name, None)
            if fn is None:
                continue
            originals[name] = fn
            setattr(dist, name, _wrap(name, fn))
        _installed = originals


def _wrap(op: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    import inspect

    import torch
    from torch.distributed.distributed_c10d import GroupMember

    tensor_type = torch.Tensor
    now = time.time
    completed = CallState.COMPLETED
    params = list(inspect.signature(fn).parameters)
    group_at = params.index("group") if "group" in params else None
    batch = op == "batch_isend_irecv"
    p2p = op in POINT_TO_POINT

    def recorded(*args: Any, **kwargs: Any) -> Any:
        if not _level.RECORDING:  # switched live to `off`: the call alone (one attribute read)
            return fn(*args, **kwargs)
        try:
            if batch:
                group = getattr(args[0][0], "group", None) if args and args[0] else None
                tensors = [p.tensor for p in args[0]] if args else []
            else:
                group = kwargs.get("group")
                if group is None and group_at is not None and len(args) > group_at:
                    group = args[group_at]
                if group is None:  # the default group, as it is now (it may be re-created)
                    group = GroupMember.WORLD
                tensors = [
                    a if isinstance(a, tensor_type) else a[0]
                    for a in args
                    if isinstance(a, tensor_type)
                    or (isinstance(a, list) and a and isinstance(a[0], tensor_type))
                ]
            frame = sys._getframe(1)
            entry, generation = _recorder.begin(
                op, p2p, group, tensors, (frame.f_code.co_filename, frame.f_lineno)
            )
        except Exception:  # recording must never change the call
            return fn(*args, **kwargs)
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            entry.fail(exc, generation)
            send_last_words()  # before a client that tears the group down kills us too
            raise
        if result is None:  # a synchronous call returned: done (inlined, the hot path)
            if entry.device:
                _recorder.returned(entry, generation)
            elif entry.generation == generation:
                entry.end = now()
                entry.state = completed
            return None
        if not _is_work(result):
            if isinstance(result, list) and result and _is_work(result[0]):
                return [_RecordedWork(w, entry, generation) for w in result]
            _recorder.returned(entry, generation)
            return result
        return _RecordedWork(result, entry, generation)

    recorded.__wrapped__ = fn  # type: ignore[attr-defined]
    recorded.__name__ = fn.__name__
    recorded.__doc__ = fn.__doc__
    return recorded


def _is_work(value: Any) -> bool:
    return hasattr(value, "wait") and hasattr(value, "is_completed")


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches torch.distributed as soon as its module has executed."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "torch.distributed":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original_exec = loader.exec_module

        def exec_and_patch(module: ModuleType) -> None:
            original_exec(module)
            with contextlib.suppress(Exception):
                _patch(module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec
