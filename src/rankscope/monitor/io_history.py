"""The whole run's step series of one rank, kept small and written to the run directory.

The monitor's live series holds the last 1,024 steps and dies with the process; a report made
after the job needs the loss, step time, tokens/s and grad norm of the whole run. On each
heartbeat (the probe thread, never the training thread) the new rows of the recorder join a
bounded history: one point per `stride` steps, at most `MAX_POINTS`; when full, neighbours
merge and the stride doubles, so a run of any length keeps its shape in about 10 KB. A point
keeps its last step's time, loss and grad norm, and the tokens of every step since the point
before it (the average tokens/s of the interval stays exact).

The history goes to `<run_dir>/<job>/steps-<who>.json` through the hub (one fire-and-forget
call, files 0600 like the rest of the run directory): first when a rank has steps, then at most
every `write_every` seconds while it steps, once when the steps stop, and at the process's exit.
A job killed with SIGKILL loses at most the last `write_every` seconds of steps.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rankscope.runtime.run_dir import STEPS_PREFIX

__all__ = [
    "MAX_POINTS",
    "STEPS_PREFIX",
    "HistoryWriter",
    "StepHistory",
    "file_name",
    "history_writer",
]

MAX_POINTS = 128
"""Points kept per rank (about 8 KB of JSON; 4,096 ranks: 32 MB in the run directory)."""
WRITE_EVERY_S = 30.0
"""While a rank steps, its history is rewritten at most this often (or every 10 heartbeats,
whichever is longer: 4,096 ranks at a 12.5 s heartbeat write 33 small files per second)."""
COLUMNS = ("step", "t", "loss", "tokens", "grad_norm")


def _short(value: float | None, digits: int = 6) -> float | None:
    """Six significant digits: the chart needs no more and the file stays small."""
    if value is None:
        return None
    if not math.isfinite(value):
        return value
    return float(f"{value:.{digits}g}")


@dataclass
class StepHistory:
    """The downsampled series: points of [step, t, loss, tokens since the point before, grad
    norm]; the steps not yet making a whole point wait in `pending`."""

    max_points: int = MAX_POINTS
    stride: int = 1
    points: list[list[Any]] = field(default_factory=list)
    pending: list[Any] | None = None
    pending_steps: int = 0
    last_step: int = -1
    steps_seen: int = 0

    def add(self, rows: Sequence[tuple[int, float, Any, Any, Any]]) -> int:
        """Rows of (step, t, loss, tokens, grad_norm), oldest first; those at or before the
        last step seen are skipped (the recorder's deque is read whole each time: the new ones
        are found from the end). Returns how many were new."""
        new, start = 0, len(rows)
        while start > 0 and rows[start - 1][0] > self.last_step:
            start -= 1
        for step, t, loss, tokens, grad_norm in rows[start:]:
            if step <= self.last_step:
                continue
            self.last_step = step
            new += 1
            tok = tokens if isinstance(tokens, (int, float)) else None
            if self.pending is None:
                self.pending = [step, t, loss, tok, grad_norm]
            else:
                before = self.pending[3]
                total = tok if before is None else before + (tok or 0.0)
                self.pending = [step, t, loss, total, grad_norm]
            self.pending_steps += 1
            if self.pending_steps >= self.stride:
                self.points.append(self.pending)
                self.pending, self.pending_steps = None, 0
                if len(self.points) > self.max_points:
                    self._halve()
        self.steps_seen += new
        return new

    def _halve(self) -> None:
        """Merge neighbours: the later one's step, time, loss and norm, both ones' tokens."""
        merged = []
        for i in range(0, len(self.points) - 1, 2):
            a, b = self.points[i], self.points[i + 1]
            tokens = b[3] if a[3] is None else a[3] + (b[3] or 0.0)
            merged.append([b[0], b[1], b[2], tokens, b[4]])
        if len(self.points) % 2:
            merged.append(self.points[-1])
        self.points = merged
        self.stride *= 2

    def rows(self) -> list[list[Any]]:
        """Every point, the unfinished one last (the newest step is always in)."""
        every = [*self.points, *([self.pending] if self.pending is not None else [])]
        return [
            [s, round(t, 3), _short(loss), _short(tok), _short(gn)] for s, t, loss, tok, gn in every
        ]


def file_name(rank: int | None, group: str, pid: int, node: str = "") -> str:
    """`steps-rank3-<group>.json`, or `steps-<node>-pid123.json` for a process without a rank
    (pids repeat across nodes)."""
    if rank is None:
        where = re.sub(r"[^A-Za-z0-9_.-]+", "_", node)[:60].strip("._") if node else ""
        return f"{STEPS_PREFIX}{where + '-' if where else ''}pid{pid}.json"
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", group)[:60].strip("._") if group else ""
    return f"{STEPS_PREFIX}rank{rank}{'-' + slug if slug else ''}.json"


class HistoryWriter:
    """When this process's history goes to the run directory; all on the probe thread (and at
    exit). Never raises."""

    def __init__(self, history: StepHistory | None = None) -> None:
        self.history = history or StepHistory()
        self.unwritten = False
        self.last_write = 0.0
        self.writes = 0
        self._hub: Any = None
        self._pending: Any = None
        self._atexit = False
        # The recorder's rows and first NaN/Inf, read at exit: monitor/worker.py, which sits
        # above this module, sets it.
        self.rows_at_exit: Callable[[], tuple[Sequence[tuple[int, float, Any, Any, Any]], Any]]
        self.rows_at_exit = lambda: ((), None)

    def on_heartbeat(
        self, rows: Sequence[tuple[int, float, Any, Any, Any]], first_nonfinite: Any = None
    ) -> None:
        """Take the recorder's new rows; write when due, or when the steps stopped."""
        try:
            from rankscope.runtime.api import current_probe

            probe = current_probe()
            interval = probe.interval if probe is not None else 1.0
            new = self.history.add(rows)
            self.unwritten = self.unwritten or new > 0
            if not self.unwritten or probe is None:  # no probe: no hub to write through
                return
            now = time.monotonic()
            every = max(WRITE_EVERY_S, 10 * interval)
            if new == 0 or self.writes == 0 or now - self.last_write >= every:
                self.write(first_nonfinite)
        except Exception:  # the history is a convenience: never the probe's problem
            pass

    def document(self, first_nonfinite: Any = None) -> dict[str, Any]:
        from rankscope.context import get_context
        from rankscope.serialize import plain

        ctx = get_context()
        h = self.history
        return {
            "kind": "rankscope.steps",
            "version": 1,
            "rank": ctx.rank,
            "group": ctx.group or "",
            "node": ctx.node_ip or ctx.hostname,
            "pid": ctx.pid,
            "stride": h.stride,
            "steps_seen": h.steps_seen,
            "first_nonfinite": plain(first_nonfinite) if first_nonfinite is not None else None,
            "columns": list(COLUMNS),
            "rows": h.rows(),
        }

    def write(self, first_nonfinite: Any = None, *, wait_s: float = 0.0) -> bool:
        """Send the history to the hub (waiting `wait_s` for it, 0: not at all)."""
        import ray

        from rankscope.context import get_context
        from rankscope.runtime.hub import find_hub

        try:
            if self._pending is not None:  # the previous write's outcome, so no error lingers
                ready, _ = ray.wait([self._pending], timeout=0)
                if ready:
                    with contextlib.suppress(Exception):
                        ray.get(ready[0])
                    self._pending = None
            if self._hub is None:
                self._hub = find_hub()
                if self._hub is None:
                    return False
            doc = self.document(first_nonfinite)
            ctx = get_context()
            name = file_name(ctx.rank, ctx.group or "", ctx.pid, ctx.node_ip or ctx.hostname)
            text = json.dumps(doc, separators=(",", ":"))
            ref = self._hub.write_artifact.remote(ctx.job_id, name, text)
            self.unwritten, self.last_write = False, time.monotonic()
            self.writes += 1
            if wait_s > 0:
                ray.get(ref, timeout=wait_s)
            else:
                self._pending = ref
            if not self._atexit:
                atexit.register(self.at_exit)
                self._atexit = True
            return True
        except Exception:
            self._hub = None  # found again next time (the hub may have restarted)
            return False

    def at_exit(self) -> None:
        """The last steps, on a clean exit (a SIGKILL-ed process loses at most `write_every`)."""
        rows, first_nonfinite = self.rows_at_exit()
        if self.history.add(list(rows)) or self.unwritten:
            self.write(first_nonfinite, wait_s=2.0)


_writer = HistoryWriter()


def history_writer() -> HistoryWriter:
    """This process's writer (its history)."""
    return _writer
