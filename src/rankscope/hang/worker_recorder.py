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
import functools
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
    dtype_names,
    new_record,
    plain_shapes,
)
from rankscope.hang.worker_callsite import caller_at, default_group, error_text, tensor_metadata
from rankscope.hang.worker_wrappers import wrap
from rankscope.import_hooks import when_imported

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


class _Site:
    """What every call of one op on one process group shares, resolved at its first call."""

    __slots__ = ("device", "group", "op", "own_key", "p2p", "sequence")

    def __init__(self, op: str, p2p: bool, name: str, device: bool, pg: Any) -> None:
        self.op, self.p2p, self.group, self.device = op, p2p, name, device
        """`device`: the group's work completes on a device (NCCL), after the call returns."""
        self.own_key = f"{name}/p2p" if p2p else name
        """Our own counter's key, when torch keeps no sequence number for the group."""
        self.sequence: Callable[[], int] | None = None
        if not p2p:  # torch's own counter: aligned across ranks even if we started late
            self.sequence = getattr(pg, "_get_sequence_number_for_group", None)


Call = tuple[int, _Site, int, Any, Any, Any, Any, float]
"""One call as recorded: (generation, site, seq, shapes, dtypes, code, at, start).

`generation` is the recorder's running count; `shapes` and `dtypes` are one tensor's
`torch.Size` and dtype, or tuples of them; `code` and `at` are the caller's code object and
bytecode offset (`f_lasti`), or None and a (file, line) pair. Their text (`float32`,
`train.py:88`) waits for a snapshot: the caller's line alone is a scan of its code's line
table, which `frame.f_lineno` would pay on every collective.
"""
Done = tuple[Call, float, CallState, str]
"""How a call ended: (the call, end, state, the backend's reason when it failed)."""


failure_listeners: list[Callable[[], None]] = []
"""Called (cheaply: set a flag) when a recorded collective raises: the group judge looks at
once, before a client that tears the group down kills the ranks that could."""


class CollectiveRecorder:
    """The ring buffer and the per-group bookkeeping; one per process.

    A call is one tuple stored into a preallocated list (`_calls`), and its end one tuple
    into another (`_done`), each by a single store: a snapshot on another thread sees a
    whole call or the one before it, never a mix of two.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._calls: list[Call | None] = [None] * capacity
        self._done: list[Done | None] = [None] * capacity
        self.total = 0
        """Calls recorded since the start (the ring keeps the last `capacity`)."""
        self._groups: dict[int, tuple[str, tuple[int, ...], Any, bool]] = {}
        self._sites: dict[tuple[str, Any], _Site] = {}
        self._own_seq: dict[str, int] = collections.defaultdict(int)
        self._pending: collections.deque[tuple[Call, Any]] = collections.deque()
        self.device_backends: tuple[str, ...] = DEVICE_BACKENDS
        """Backends whose work completes on a device after the call returns."""
        self.make_event: Callable[[], Any] = _cuda_event
        """An event recorded on the current stream now; `.query()` is True once it fired."""

    def site(self, op: str, p2p: bool, group: Any) -> _Site:
        """The shared part of `op`'s calls on `group` (None: the default group, as it is now)."""
        if group is None:
            group = default_group()
        key = (op, group)
        site = self._sites.get(key)
        if site is None:
            known = self._groups.get(id(group))
            if known is None:
                known = self._groups[id(group)] = self._describe(group)
            name, _, pg, device = known
            site = self._sites[key] = _Site(op, p2p, name, device, pg)
        return site

    def entry(self, op: str, p2p: bool, group: Any) -> tuple[_Site, Callable[[], int], bool]:
        """What a wrapper keeps per group: the site, a function that returns the group's last
        sequence number (torch's counter, else ours, counted up by the call), and whether its
        work completes on a device."""
        site = self.site(op, p2p, group)
        last = site.sequence
        if last is None:
            last = functools.partial(self._own_last, site.own_key)
        return site, last, site.device

    def _own_last(self, key: str) -> int:
        """Our counter's last number for `key`, counting this call (see `sequence`)."""
        last = self._own_seq[key]
        self._own_seq[key] = last + 1
        return last

    def sequence(self, site: _Site) -> int:
        """The call's sequence number in its group (torch's counter, else ours)."""
        if site.sequence is not None:
            try:
                return site.sequence() + 1
            except Exception:
                pass
        self._own_seq[site.own_key] += 1
        return self._own_seq[site.own_key]

    def begin(
        self, op: str, p2p: bool, group: Any, tensors: Sequence[Any], caller: tuple[str, int]
    ) -> tuple[_Handle, int]:
        """Record a call as started; returns its handle and generation (the wrappers inline
        this, keeping the caller's frame position rather than its line)."""
        site = self.site(op, p2p, group)
        shapes, dtypes = tensor_metadata(tensors)
        generation = self.total
        self.total = generation + 1
        call = (generation, site, self.sequence(site), shapes, dtypes, None, caller, time.time())
        self._calls[generation % self.capacity] = call
        return _Handle(self, call), generation

    def returned(self, entry: _Handle, generation: int) -> None:
        """The Python call `begin` recorded returned (see `returned_call`)."""
        self.returned_call(entry.call)

    def returned_call(self, call: Call) -> None:
        """The Python call returned: done, or for device backends, done when its event fires."""
        if call[1].device and self._calls[call[0] % self.capacity] is call:
            try:
                self._pending.append((call, self.make_event()))
                return
            except Exception:  # no usable device event: the host's view is all we have
                pass
        self.complete(call)

    def complete(
        self, call: Call, state: CallState = CallState.COMPLETED, exc: BaseException | None = None
    ) -> None:
        """`call` ended (raising `exc`), unless a later call reused its slot meanwhile."""
        slot = call[0] % self.capacity
        if self._calls[slot] is call:
            self._done[slot] = (call, time.time(), state, "" if exc is None else error_text(exc))
        if state is CallState.FAILED:
            for listener in failure_listeners:
                with contextlib.suppress(Exception):  # a listener never changes the call
                    listener()

    def result_of(self, call: Call, result: Any) -> Any:
        """What the wrapper returns for a call that returned `result` (async work: a stand-in
        that records completion when waited on)."""
        if _is_work(result):
            return _RecordedWork(result, self, call)
        if isinstance(result, list) and result and _is_work(result[0]):
            return [_RecordedWork(w, self, call) for w in result]
        self.returned_call(call)
        return result

    def poll(self) -> None:
        """Complete the device calls whose events fired; never waits on the device."""
        for _ in range(len(self._pending)):
            call, event = self._pending.popleft()
            slot = call[0] % self.capacity
            done = self._done[slot]
            if self._calls[slot] is not call or (done is not None and done[0] is call):
                continue  # reused for a later call, or failed meanwhile
            try:
                fired = bool(event.query())
            except Exception:
                fired = False
            if fired:
                self.complete(call)
            else:
                self._pending.append((call, event))

    def _ordered(self, last: int | None = None) -> list[tuple[Call, Done | None]]:
        """Recorded calls with how they ended, oldest first (the last `last` when given)."""
        total, capacity = self.total, self.capacity
        count = min(total, capacity)
        if last is not None:
            count = min(count, last)
        first = total - count
        pairs = [(self._calls[i % capacity], self._done[i % capacity]) for i in range(first, total)]
        return [(c, d) for c, d in pairs if c is not None and c[0] >= first]

    def snapshot(self, last: int | None = None) -> RecorderSnapshot:
        """The ring buffer (only its `last` calls when given), frozen for sending."""
        self.poll()
        return RecorderSnapshot(
            records=tuple(_freeze(call, done) for call, done in self._ordered(last)),
            groups={name: ranks for name, ranks, _, _ in self._groups.values()},
            dropped=max(0, self.total - self.capacity),
            recording=_installed is not None,
            paused=not _level.RECORDING,
        )

    def in_flight(self, older_than: float) -> CollectiveRecord | None:
        """The oldest call still running that started before `older_than` (for the watchdog)."""
        self.poll()
        for call, done in self._ordered(last=16):
            if (done is None or done[0] is not call) and call[7] < older_than:
                return _freeze(call, None)
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


def _freeze(call: Call, done: Done | None) -> CollectiveRecord:
    """The record of `call` (a drain freezes thousands: see `new_record`)."""
    _, site, seq, shapes, dtypes, code, at, start = call
    if done is not None and done[0] is call:
        _, end, state, error = done
    else:
        end, state, error = None, CallState.STARTED, ""
    if type(dtypes) is not tuple:  # one tensor, kept raw
        shapes, dtypes = (shapes,), (dtypes,)
    return new_record(
        site.group, seq, site.op, plain_shapes(shapes), dtype_names(dtypes), start, end, state,
        caller_at(code, at), site.p2p, error,
    )  # fmt: skip


class _Handle:
    """One recorded call, as `begin` returns it: completes it unless its slot was reused."""

    __slots__ = ("call", "recorder")

    def __init__(self, recorder: CollectiveRecorder, call: Call) -> None:
        self.recorder, self.call = recorder, call

    def finish(self, state: CallState, generation: int) -> None:
        self.recorder.complete(self.call, state)

    def fail(self, exc: BaseException, generation: int) -> None:
        """The call raised: keep the backend's reason, it names the peer that went away."""
        self.recorder.complete(self.call, CallState.FAILED, exc)


class _RecordedWork:
    """Stands in for an async op's Work: completion is recorded when wait() returns."""

    def __init__(self, work: Any, recorder: CollectiveRecorder, call: Call) -> None:
        self._work, self._recorder, self._call = work, recorder, call

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        try:
            result = self._work.wait(*args, **kwargs)
        except BaseException as exc:
            self._recorder.complete(self._call, CallState.FAILED, exc)
            raise
        self._recorder.returned_call(self._call)
        return result

    def is_completed(self) -> bool:
        done = bool(self._work.is_completed())
        if done:
            self._recorder.complete(self._call)
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
    when_imported({"torch.distributed": _patch})


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
    """`fn`, recording each call into this process's ring (see `hang.worker_wrappers`)."""
    return wrap(op, fn, _recorder, op in POINT_TO_POINT)


def _is_work(value: Any) -> bool:
    return hasattr(value, "wait") and hasattr(value, "is_completed")
