"""The run directory: where the hub keeps each job's events and artifacts, and how.

Events from probes go through a bounded queue (a slow disk must not stall heartbeats: what does
not fit is counted, not kept) and are appended in batches to `<run_dir>/<job>/events.jsonl`;
reads look back from the end of that file. Artifacts (reports) are written to a temporary name
and renamed, so a reader never sees half a file. File work runs in threads, off the hub's loop.

What lands here holds stacks, arguments and logs: directories are created 0700 and files 0600,
readable by the job's user only. A disk that refuses writes (full: ENOSPC, read-only, quota)
costs events, never the hub or the job: each lost event is counted in `dropped` and the hub
logs one warning, the first time.

No Ray here beyond asking the Ray session where its directory is.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import stat
import tempfile
from dataclasses import asdict
from typing import Any

from rankscope.config import Config
from rankscope.files import FILE_MODE, private_dirs
from rankscope.runtime.protocol import Event
from rankscope.serialize import parse_json

__all__ = [
    "EVENT_SCAN_BYTES",
    "STEPS_PREFIX",
    "EventSink",
    "append_events",
    "choose_run_dir",
    "private_dir",
    "read_reports",
    "tail_events",
    "write_atomically",
]

log = logging.getLogger("rankscope")


EVENT_SCAN_BYTES = 64 << 20
"""How far back from the end of events.jsonl a read looks for matching events."""
WRITE_BATCH = 1000
"""Events written per append at most."""


def choose_run_dir(config: Config) -> str:
    """RANKSCOPE_RUN_DIR, else `rankscope/` inside this Ray session's directory."""
    if config.run_dir:
        return config.run_dir
    try:
        from ray._private.worker import _global_node

        session_dir: str = _global_node.get_session_dir_path()  # type: ignore[attr-defined]
        return os.path.join(session_dir, "rankscope")
    except Exception:
        return os.path.join(tempfile.gettempdir(), "rankscope")


class EventSink:
    """The bounded queue between probes' heartbeats and the job's events.jsonl."""

    def __init__(self, run_dir: str, queue_size: int) -> None:
        self.run_dir = run_dir
        self.dropped = 0  # events lost: the queue was full, or the disk refused them
        self.write_error = ""
        """The first write error (e.g. `No space left on device`); warned about once."""
        self._queue: asyncio.Queue[tuple[str, str, Event]] = asyncio.Queue(maxsize=queue_size)

    def offer(self, job_id: str, probe_id: str, event: Event) -> None:
        """Queue one event for writing, or count it as dropped when the queue is full."""
        try:
            self._queue.put_nowait((job_id, probe_id, event))
        except asyncio.QueueFull:
            self.dropped += 1

    async def write_forever(self) -> None:
        """Drain the queue into <run_dir>/<job>/events.jsonl in batches."""
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty() and len(batch) < WRITE_BATCH:
                batch.append(self._queue.get_nowait())
            try:
                await asyncio.to_thread(append_events, self.run_dir, batch)
            except OSError as exc:
                self.refused(len(batch), exc)

    def refused(self, count: int, exc: OSError) -> None:
        """The disk refused `count` events: count them; warn the first time only."""
        self.dropped += count
        if not self.write_error:
            self.write_error = exc.strerror or str(exc)
            log.warning(
                "rankscope hub: cannot write events under %s (%s); dropping them and counting "
                "the loss (`dropped_events` in the hub's info); the job is not affected",
                self.run_dir,
                self.write_error,
            )


def append_events(run_dir: str, batch: list[tuple[str, str, Event]]) -> None:
    """Append (job, probe, event) records as JSON lines, one file per job."""
    by_job: dict[str, list[str]] = collections.defaultdict(list)
    for job_id, probe_id, event in batch:
        by_job[job_id].append(json.dumps({"probe_id": probe_id, **asdict(event)}, default=str))
    for job_id, lines in by_job.items():
        job_dir = private_dir(run_dir, job_id)
        path = os.path.join(job_dir, "events.jsonl")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        with open(fd, "a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


def private_dir(run_dir: str, job_id: str) -> str:
    """`<run_dir>/<job>`, created (with `run_dir`) readable by this user only; its path."""
    return private_dirs(os.path.join(run_dir, job_id or "no-job"))


def tail_events(
    run_dir: str, job_id: str, kinds: list[str] | None, limit: int
) -> list[dict[str, Any]]:
    """The job's last `limit` events (of `kinds`, by prefix, when given), oldest first.

    Without `kinds`, the hub's own records of who is who (`probe.*`) are left out: they are
    bookkeeping for reports, not events; `kinds=[""]` reads every record.
    """
    path = os.path.join(run_dir, job_id or "no-job", "events.jsonl")
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return []  # a device or a pipe in its place: nothing to read back
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            start = max(0, f.tell() - EVENT_SCAN_BYTES)
            f.seek(start)
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    if start > 0:
        lines = lines[1:]  # the first line was cut in the middle
    found: list[dict[str, Any]] = []
    for raw in reversed(lines):
        try:
            event = parse_json(raw)
        except ValueError:
            continue
        if not _well_formed(event):
            continue  # a line the hub did not write (or a damaged one): readers never see it
        kind = str(event.get("kind", ""))
        if kind.startswith(tuple(kinds)) if kinds is not None else not kind.startswith("probe."):
            found.append(event)
            if len(found) >= limit:
                break
    return found[::-1]


def _well_formed(event: Any) -> bool:
    """What `append_events` writes: an object with a text kind, a numeric time, an object
    payload (and a text probe id)."""
    return (
        isinstance(event, dict)
        and isinstance(event.get("kind"), str)
        and isinstance(event.get("time"), (int, float))
        and not isinstance(event.get("time"), bool)
        and isinstance(event.get("payload", {}), dict)
        and isinstance(event.get("probe_id", ""), str)
    )


def write_atomically(run_dir: str, job_id: str, name: str, text: str) -> str:
    """Write `<run_dir>/<job>/<name>` through a temporary file and a rename; returns its path."""
    job_dir = private_dir(run_dir, job_id)
    path = os.path.join(job_dir, name)
    fd, tmp = tempfile.mkstemp(dir=job_dir, prefix=".tmp-")  # created 0600; the rename keeps it
    try:
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # no half-written temporary left behind on a full disk
        raise
    return path


REPORTS_READ = 20
"""JSON reports read back at most (the newest)."""
REPORT_BYTES = 32 << 20
"""A JSON report bigger than this is not read back (named instead)."""
TRACE_PREFIX = "trace-"
"""Trace-event files (`rankscope trace`, `enable_detailed_tracing`): opened in Perfetto."""
STEPS_PREFIX = "steps-"
"""`steps-<who>.json`: one rank's whole-run step series (the monitor writes them, the report
reads them); many per job, so not among the reports."""


def read_reports(
    run_dir: str, job_id: str
) -> tuple[dict[str, Any], list[str], list[tuple[str, int]]]:
    """The newest JSON reports of a job (`hang-report-*.json`, `memory-profile-*.json`, ...),
    parsed, by file name; what could not be read, one line each; and every file of the job
    directory with its size (traces are listed, not read: they are for Perfetto)."""
    job_dir = os.path.join(run_dir, job_id or "no-job")
    try:
        files = sorted(
            ((n, os.path.getsize(os.path.join(job_dir, n))) for n in os.listdir(job_dir)),
            key=lambda f: os.path.getmtime(os.path.join(job_dir, f[0])),
        )
    except OSError:
        return {}, [], []
    not_reports = (TRACE_PREFIX, STEPS_PREFIX)
    names = [n for n, _ in files if n.endswith(".json") and not n.startswith(not_reports)]
    reports: dict[str, Any] = {}
    skipped: list[str] = []
    for name in names[-REPORTS_READ:]:
        path = os.path.join(job_dir, name)
        try:
            if os.path.getsize(path) > REPORT_BYTES:
                skipped.append(f"{name}: larger than {REPORT_BYTES >> 20} MiB, not read")
                continue
            with open(path, "rb") as f:
                reports[name] = parse_json(f.read())
        except (OSError, ValueError) as exc:
            skipped.append(f"{name}: unreadable ({type(exc).__name__}), skipped")
    return reports, skipped, [f for f in files if not f[0].startswith(".")]
