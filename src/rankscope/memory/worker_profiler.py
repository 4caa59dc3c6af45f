"""`MemoryProfiler`: snapshots of one process over time, the leak test, suspects, a report."""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import functools
import linecache
import logging
import os
import threading
import time
import tracemalloc
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from rankscope.memory import analysis
from rankscope.memory import worker_snapshot as snap
from rankscope.memory.model import AllocationSite, LeakFinding, MemorySnapshot

log = logging.getLogger("rankscope")

DEFAULT_MAX_SNAPSHOTS = 4096
CUDA_HISTORY_ENTRIES = 100_000
"""Allocation events torch keeps for memory_viz with track_allocations on CUDA."""
TRACEMALLOC_FRAMES = 1
SUSPECTS_SHOWN = 10
LEAK_RETEST_GROWTH = 1.1
"""The leak test runs again on a snapshot when the history grew by this factor."""
SUSPECTS_COST_FACTOR = 10.0
"""A reused comparison is redone no sooner than this many times what the last one took, so
suspects of a huge Python heap cost at most about a tenth of one thread's time."""
SiteTotals = dict[tuple[str, int], tuple[int, int]]
T = TypeVar("T")
YIELD_EVERY = 1000
"""Traced blocks grouped between two yields of the GIL (about 1-3 ms of work)."""

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_profilers: list[weakref.ref[MemoryProfiler]] = []
_profilers_lock = threading.Lock()


class MemoryProfiler:
    """Snapshots of this process's host and CUDA memory, a leak test and an HTML report.

    Example:
        profiler = rankscope.MemoryProfiler(model, optimizer=opt)
        for step in range(steps):
            train_step(...)
            profiler.take_snapshot(step=step)
        if profiler.leak_detected:
            print(profiler.leak_report().summary())
        profiler.generate_report("memory.html")

    Keeps at most `max_snapshots` snapshots: beyond it, every other one after the warm-up is
    dropped (the trend stays; `thinned` counts what went). With `track_allocations=True`,
    tracemalloc runs on the host (its baseline is taken when the warm-up ends) and, on CUDA,
    torch records its allocation history for `dump_allocation_history` (pytorch.org/memory_viz).
    """

    def __init__(
        self,
        model: Any = None,
        *,
        optimizer: Any = None,
        track_allocations: bool = False,
        leak_detection: bool = True,
        device: Any = None,
        max_snapshots: int = DEFAULT_MAX_SNAPSHOTS,
        leak_thresholds: analysis.LeakThresholds | None = None,
        thresholds: analysis.MemoryThresholds | None = None,
        label: str | None = None,
    ) -> None:
        if max_snapshots < 16:
            raise ValueError(f"max_snapshots ({max_snapshots}) must be at least 16")
        self.model = model
        self.optimizer = optimizer
        self.track_allocations = track_allocations
        self.leak_detection = leak_detection
        self.leak_thresholds = leak_thresholds or analysis.LeakThresholds()
        self.thresholds = thresholds or analysis.MemoryThresholds()
        self.max_snapshots = max_snapshots
        self.label = label or _default_label()
        self.thinned = 0
        """Snapshots dropped to stay within max_snapshots."""
        self._device = snap.cuda_device_index(device) if device != "cpu" else None
        self._snapshots: list[MemorySnapshot] = []
        self._lock = threading.Lock()
        self._tracing = False
        self._owns_tracemalloc = False
        self._baseline: SiteTotals | None = None
        """Bytes and blocks per allocation site when the warm-up ended."""
        self.tracemalloc_snapshots = 0
        """tracemalloc snapshots taken: the baseline, then one per suspects comparison."""
        self._suspects_lock = threading.Lock()
        self._last_suspects: tuple[float, int, tuple[AllocationSite, ...]] | None = None
        """(monotonic time, limit, sites) of the last comparison."""
        self._suspects_cost_s = 0.0
        self._last_leaks: tuple[float, int, tuple[LeakFinding, ...]] | None = None
        """(monotonic time, snapshots tested, findings) of the last leak test."""
        self._leaks_cost_s = 0.0
        """How long the last comparison took."""
        self._recording_cuda = False
        self._closed = False
        self._verdict: tuple[int, bool] = (0, False)
        """(history length when last tested, its verdict): `_leak_verdict` reuses it."""
        if track_allocations:
            self._start_tracking()
        with _profilers_lock:
            _profilers[:] = [r for r in _profilers if r() is not None]
            _profilers.append(weakref.ref(self))

    # ------------------------------------------------------------ snapshots
    @property
    def device(self) -> int | None:
        """The CUDA device index watched, or None on the host only."""
        return self._device

    def take_snapshot(self, tag: str | None = None, step: int | None = None) -> MemorySnapshot:
        """Record this process's memory now; costs a few microseconds without tracemalloc."""
        traced = tracemalloc.get_traced_memory()[0] if self._tracing else None
        s = snap.take_snapshot(
            step=step,
            tag=tag,
            cuda_device=self._device,
            model=self.model,
            optimizer=self.optimizer,
            tracemalloc_current=traced,
        )
        with self._lock:
            self._snapshots.append(s)
            count = len(self._snapshots)
            if count > self.max_snapshots:
                self._thin()
        if self._tracing and self._baseline is None and count > self.leak_thresholds.warmup:
            self._baseline = self._take_tracemalloc()
        if self.leak_detection:
            s = dataclasses.replace(s, leak_detected=self._leak_verdict(count))
            with self._lock:
                if self._snapshots and self._snapshots[-1].time == s.time:
                    self._snapshots[-1] = s
        return s

    def _leak_verdict(self, count: int) -> bool:
        """The leak test over the history, redone when it grew by a tenth since the last one:
        on 2,000 snapshots the test takes ~60 ms, so every step would cost the training."""
        if count < self.leak_thresholds.warmup + self.leak_thresholds.min_points:
            return False
        tested, verdict = self._verdict
        if tested and count < tested * LEAK_RETEST_GROWTH and count >= tested:
            return verdict
        verdict = any(f.leak for f in analysis.detect_leaks(self.snapshots, self.leak_thresholds))
        self._verdict = (count, verdict)
        return verdict

    def _thin(self) -> None:
        keep = self.leak_thresholds.warmup
        head, tail = self._snapshots[:keep], self._snapshots[keep:]
        kept = tail[::2]
        if tail and kept[-1] is not tail[-1]:
            kept.append(tail[-1])
        self.thinned += len(tail) - len(kept)
        self._snapshots = head + kept

    @property
    def snapshots(self) -> tuple[MemorySnapshot, ...]:
        with self._lock:
            return tuple(self._snapshots)

    # ----------------------------------------------------------------- leaks
    @property
    def leak_detected(self) -> bool:
        """True when a metric grows steadily after the warm-up (see `leak_report`)."""
        return self.leak_detection and self.leak_report(suspects=0).leak_detected

    def leak_report(
        self, *, suspects: int = SUSPECTS_SHOWN, suspects_max_age_s: float = 0.0
    ) -> analysis.LeakReport:
        """Every leak test (growth per step and per second, time until full) and suspects
        (`suspects=0`: none, and no tracemalloc snapshot; `suspects_max_age_s`: see `suspects`).

        With `suspects_max_age_s`, the leak test itself (hundreds of milliseconds over a long
        history) is also reused while younger than SUSPECTS_COST_FACTOR times what it took, so
        a `memory --watch` every 2 s never spends more than a tenth of a thread on it.
        """
        findings, tested = self._leak_findings(reuse=suspects_max_age_s > 0)
        return analysis.LeakReport(
            label=self.label,
            snapshots=tested,
            findings=findings,
            suspects=self.suspects(suspects, max_age_s=suspects_max_age_s),
        )

    def _leak_findings(self, *, reuse: bool) -> tuple[tuple[LeakFinding, ...], int]:
        last = self._last_leaks
        spacing = SUSPECTS_COST_FACTOR * self._leaks_cost_s
        if reuse and last is not None and time.monotonic() - last[0] < spacing:
            return last[2], last[1]
        started = time.monotonic()
        history = self.snapshots
        findings = analysis.detect_leaks(history, self.leak_thresholds)
        self._leaks_cost_s = time.monotonic() - started
        self._last_leaks = (time.monotonic(), len(history), findings)
        return findings, len(history)

    def suspects(
        self, limit: int = SUSPECTS_SHOWN, *, max_age_s: float = 0.0
    ) -> tuple[AllocationSite, ...]:
        """The allocation sites that grew most since the warm-up (needs track_allocations).

        Each comparison takes a tracemalloc snapshot: C code that holds the GIL (so stalls every
        thread, training included) for as long as it walks the traced blocks, tens to hundreds
        of milliseconds in a big process. With `max_age_s`, the last comparison is reused while
        it is younger than that, or than SUSPECTS_COST_FACTOR times what the last comparison
        took (the probe's `memory` command; `suspects_age_s` says how old).
        """
        baseline = self._baseline
        if baseline is None or limit <= 0 or not tracemalloc.is_tracing():
            return ()
        with self._suspects_lock:
            last = self._last_suspects
            spacing = max(max_age_s, SUSPECTS_COST_FACTOR * self._suspects_cost_s)
            if (
                last is not None
                and max_age_s > 0
                and last[1] >= limit
                and time.monotonic() - last[0] < spacing
            ):
                return last[2][:limit]
            started = time.monotonic()
            sites = growing_sites(self._take_tracemalloc(), baseline, limit)
            self._suspects_cost_s = time.monotonic() - started
            self._last_suspects = (time.monotonic(), limit, sites)
            return sites

    @property
    def suspects_age_s(self) -> float | None:
        """Seconds since the suspects were last compared; None before the first comparison."""
        last = self._last_suspects
        return None if last is None else time.monotonic() - last[0]

    def findings(self) -> tuple[analysis.Finding, ...]:
        """Fragmentation, outside-PyTorch and usage verdicts of the latest snapshot."""
        history = self.snapshots
        return analysis.snapshot_findings(history[-1], self.thresholds) if history else ()

    # --------------------------------------------------------------- outputs
    def generate_report(self, path: str | os.PathLike[str]) -> str:
        """Write one self-contained HTML file (no network needed) and return its path."""
        from rankscope.memory.io_report import ProcessSection, write_report

        report = self.leak_report()
        section = ProcessSection(
            label=self.label,
            snapshots=self.snapshots,
            leaks=report.findings if self.leak_detection else (),
            findings=self.findings(),
            suspects=report.suspects,
            note=f"{self.thinned} snapshots thinned out" if self.thinned else "",
        )
        return write_report(path, f"rankscope memory report: {self.label}", [section])

    def dump_allocation_history(self, path: str | os.PathLike[str]) -> str:
        """Write torch's CUDA allocation history as a pickle that pytorch.org/memory_viz opens."""
        if not self._recording_cuda:
            raise RuntimeError(
                "no CUDA allocation history: use MemoryProfiler(track_allocations=True) "
                "in a process that uses a CUDA device"
            )
        torch = snap.torch_if_loaded()
        torch.cuda.memory._dump_snapshot(os.fspath(path))
        return os.fspath(path)

    def _take_tracemalloc(self) -> SiteTotals:
        self.tracemalloc_snapshots += 1
        return site_totals(tracemalloc.take_snapshot())

    # ------------------------------------------------------------- lifetime
    def _start_tracking(self) -> None:
        if not tracemalloc.is_tracing():  # someone else's tracing: read it, never stop it
            tracemalloc.start(TRACEMALLOC_FRAMES)
            self._owns_tracemalloc = True
        self._tracing = True
        if self._device is not None:
            torch = snap.torch_if_loaded()
            try:
                torch.cuda.memory._record_memory_history(
                    enabled="all", max_entries=CUDA_HISTORY_ENTRIES
                )
                self._recording_cuda = True
            except Exception as exc:
                log.warning("rankscope: CUDA allocation history not recorded: %s", exc)

    def close(self) -> None:
        """Stop what this profiler started (tracemalloc, CUDA history); snapshots stay."""
        if self._closed:
            return
        self._closed = True
        if self._owns_tracemalloc and tracemalloc.is_tracing():
            tracemalloc.stop()
        self._tracing = False
        self._baseline = None
        self._last_suspects = None
        self._last_leaks = None
        if self._recording_cuda:
            torch = snap.torch_if_loaded()
            with contextlib.suppress(Exception):
                torch.cuda.memory._record_memory_history(enabled=None)
            self._recording_cuda = False

    def __enter__(self) -> MemoryProfiler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"MemoryProfiler({self.label}, {len(self._snapshots)} snapshots, "
            f"device={self._device}, track_allocations={self.track_allocations})"
        )


def active_profiler() -> MemoryProfiler | None:
    """The most recently created profiler of this process that is still alive."""
    with _profilers_lock:
        for ref in reversed(_profilers):
            p = ref()
            if p is not None:
                return p
    return None


def site_totals(snapshot: tracemalloc.Snapshot) -> SiteTotals:
    """(bytes, blocks) per allocation site (file, line), tracemalloc's and ours left out.

    The sites are grouped first and filtered after: the same result as `filter_traces` then
    `statistics("lineno")` (both look at the most recent frame only), without a pattern match
    per traced block. With tracemalloc on, every object this loop makes is traced too, so it
    runs at about 3 µs a block; it lets other threads take the GIL every YIELD_EVERY blocks,
    else each of a training thread's returns to Python would wait up to the 5 ms switch interval.
    """
    raw = getattr(snapshot.traces, "_traces", None)  # (domain, size, frames, ...) tuples
    if not isinstance(raw, list):  # a Python that keeps them otherwise: the stdlib's grouping
        return _site_totals_by_stdlib(snapshot)
    sizes: dict[tuple[str, int], int] = {}
    counts: dict[tuple[str, int], int] = {}
    for trace in _yielding(raw):
        frame = trace[2][0]
        if frame in sizes:
            sizes[frame] += trace[1]
            counts[frame] += 1
        else:
            sizes[frame] = trace[1]
            counts[frame] = 1
    return {
        site: (size, counts[site])
        for site, size in _yielding(list(sizes.items()))
        if not _left_out(site[0])
    }


def _yielding(items: Sequence[T]) -> Iterator[T]:
    """`items`, with a yield of the GIL (`time.sleep(0)`) every YIELD_EVERY of them."""
    for start in range(0, len(items), YIELD_EVERY):
        yield from items[start : start + YIELD_EVERY]
        time.sleep(0)


def _site_totals_by_stdlib(snapshot: tracemalloc.Snapshot) -> SiteTotals:
    out: SiteTotals = {}
    for stat in snapshot.statistics("lineno"):
        frame = stat.traceback[0]
        if not _left_out(frame.filename):
            out[(frame.filename, frame.lineno)] = (stat.size, stat.count)
    return out


def growing_sites(
    current: SiteTotals, baseline: SiteTotals, limit: int
) -> tuple[AllocationSite, ...]:
    """The `limit` sites whose bytes grew most from `baseline` to `current`."""
    growth = []
    for site, (size, count) in _yielding(list(current.items())):
        old_size, old_count = baseline.get(site, (0, 0))
        if size > old_size:
            growth.append((size - old_size, count - old_count, size, site))
    growth.sort(key=lambda g: (-g[0], g[3]))  # ties: by file and line
    return tuple(
        AllocationSite(
            location=f"{filename}:{lineno}",
            size_diff=size_diff,
            count_diff=count_diff,
            size=size,
            line=linecache.getline(filename, lineno).strip(),
        )
        for size_diff, count_diff, size, (filename, lineno) in growth[:limit]
    )


def _as_source(filename: str) -> str:
    return filename[:-1] if filename.endswith(".pyc") else filename


_LEFT_OUT = tuple(
    _as_source(pattern)
    for pattern in (
        tracemalloc.__file__,
        "<frozen importlib._bootstrap*>",
        linecache.__file__,
        os.path.join(_PACKAGE_DIR, "*"),
    )
)


@functools.lru_cache(maxsize=8192)
def _left_out(filename: str) -> bool:
    """tracemalloc.Filter(False, pattern)'s test: shell patterns, a .pyc read as its .py."""
    filename = _as_source(filename)
    return any(fnmatch.fnmatch(filename, pattern) for pattern in _LEFT_OUT)


def _default_label() -> str:
    from rankscope.context import get_context

    try:
        ctx = get_context()
    except Exception:
        return f"pid {os.getpid()}"
    return ctx.label
