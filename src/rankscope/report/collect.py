"""Gathering one job's data for its report: the run directory, and the hub when it is live.

A run directory is `<run_dir>/<job>/` (events.jsonl and the JSON reports features wrote) or
the `<run_dir>` above it. Without a path, the events and reports come through the hub, which
reads them on its node (the CLI may run on another machine), with a live snapshot of the job.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rankscope.errors import UserError
from rankscope.hang.motion import moved
from rankscope.report.collect_files import JobFiles, is_trace, read_job_files, read_on_hub_node
from rankscope.report.collect_straggler_places import sample_places, stragglers
from rankscope.report.model import RunData
from rankscope.runtime.run_dir import read_reports, tail_events
from rankscope.serialize import plain

if TYPE_CHECKING:
    from rankscope.runtime.ask import Selection
    from rankscope.runtime.client import HubClient

EVENT_LIMIT = 20_000
"""Events read at most (the newest): enough for a run's story, bounded for huge runs."""
EVERY_KIND = [""]
"""Events of every kind, the hub's records of who is who (`probe.registered`) included."""
MOTION_GAP_S = 2.0
"""Two reads of the ranks' `motion` at least this far apart (two heartbeats): a rank its group
waits for that moved in between is slow, not stuck."""
PENDING_WAIT_S = 15.0
"""How long the page waits for Ray's state API (read beside the ranks) before going on."""
ASKS_WAIT_S = 60.0
"""How long the page waits for one question to the ranks, asked beside the others: each has its
own shorter deadline (`runtime.deadlines`) and the hub call's; this only bounds a stuck thread."""
MEMORY_POINTS = 60
"""Heartbeat snapshots of memory per rank the live report reads: a trend, not a history."""
LIVE_MEMORY_RANKS = 64
"""Up to this many ranks the Memory section charts every rank; past it, the leaking ones."""
HANG_MIN_WAIT_S = 5.0
"""As `rankscope hang`'s default: a shorter wait in a collective is not yet a hang."""


def collect_run(
    path: str | None,
    address: str | None,
    job: str | None,
    *,
    live: bool = True,
    files_here: bool | None = None,
) -> RunData:
    """From a run directory when `path` is given, else through the hub (with a live snapshot).
    Through the hub, the traces and step series are read on this machine when the hub's run
    directory is here, else on the hub's node (`files_here` decides instead when given)."""
    if path is not None:
        job_dir = find_job_dir(path, job)
        if job_dir is None:
            return RunData(job_id=job or "?", source=os.path.abspath(path))
        run_dir, job_id = os.path.split(job_dir)
        events = tuple(tail_events(run_dir, job_id, EVERY_KIND, EVENT_LIMIT))
        artifacts, skipped, files = read_reports(run_dir, job_id)
        found = read_job_files(job_dir, files, series=True)
        return RunData(
            job_id,
            os.path.abspath(job_dir),
            events,
            artifacts,
            files=tuple(files),
            health=found.health,
            series=found.series,
            series_from=found.series_from,
            traces=found.traces,
            notes=(*skipped, *found.notes),
        )
    return _from_hub(address, job, live=live, files_here=files_here)


def find_job_dir(path: str, job: str | None) -> str | None:
    """The job's directory under `path`; None for an empty run directory."""
    if not os.path.isdir(path):
        raise UserError(f"{path}: not a directory; give a run directory (<run_dir>/<job>/)")
    if _is_job_dir(path):
        if job is not None and os.path.basename(os.path.normpath(path)) != job:
            raise UserError(f"--job {job}: {path} is the directory of another job")
        return path
    entries = os.listdir(path)
    jobs = sorted(e for e in entries if _is_job_dir(os.path.join(path, e)))
    if job is not None:
        if job not in jobs:
            raise UserError(
                f"--job {job}: no such job in {path} (jobs there: {', '.join(jobs) or 'none'})"
            )
        return os.path.join(path, job)
    if jobs:
        return max((os.path.join(path, j) for j in jobs), key=_last_written)
    if entries:
        raise UserError(
            f"{path}: not a rankscope run directory (no events.jsonl or reports in it or in "
            "its subdirectories); RANKSCOPE_RUN_DIR or `rankscope events` says where it is"
        )
    return None


def _from_hub(
    address: str | None, job: str | None, *, live: bool, files_here: bool | None
) -> RunData:
    from rankscope.doctor.collect import job_environments
    from rankscope.hang.collect import hang_reports
    from rankscope.monitor.collect import job_tops
    from rankscope.runtime.ask import Selection
    from rankscope.runtime.client import HubClient
    from rankscope.stacks.collect import stack_reports
    from rankscope.status.collect import job_statuses

    client = HubClient.attach(address)
    job_id = next(iter(client.jobs(job)))
    this_job = Selection(job_id)
    events = tuple(client.events(job_id, EVERY_KIND, EVENT_LIMIT))
    artifacts, skipped, files = client.reports(job_id)  # read on the hub's node, wherever it is
    job_dir = os.path.join(client.info().run_dir, job_id)
    [status] = job_statuses(address, this_job, client=client)
    processes = tuple(plain(p) for p in status.processes)
    alive = any(p.get("state") != "dead" for p in processes)
    hang: tuple[dict[str, Any], ...] = ()
    stacks: tuple[dict[str, Any], ...] = ()
    health: tuple[dict[str, Any], ...] = ()
    top: tuple[dict[str, Any], ...] = ()
    series: tuple[dict[str, Any], ...] = ()
    environment: tuple[dict[str, Any], ...] = ()
    pending: tuple[dict[str, Any], ...] = ()
    notes = list(skipped)
    moving: dict[str, str] = {}
    odd_places: tuple[dict[str, Any], ...] = ()
    if live and alive:
        looked_at = time.monotonic()
        # every question at once, each on its own thread: the ranks answer them in one or two
        # polls, and the page takes about as long as its slowest question, not their sum
        unplaced = _Background(_pending, address, job_id)  # Ray's state API
        asked_hang = _Background(
            lambda: hang_reports(address, this_job, min_wait_s=HANG_MIN_WAIT_S, client=client)
        )
        asked_stacks = _Background(lambda: stack_reports(address, this_job, client=client))
        asked_top = _Background(lambda: job_tops(address, this_job, client=client))
        asked_series = _Background(_monitor, address, this_job, client)
        asked_memory = _Background(_live_memory, client, job_id)
        asked_env = _Background(lambda: job_environments(address, this_job, client=client))
        hang = tuple(plain(r) for r in asked_hang.result(ASKS_WAIT_S))
        stacks = tuple(plain(r) for r in asked_stacks.result(ASKS_WAIT_S))
        look_again = _any_finding(hang) or _any_finding(stacks)  # slow, or stuck?
        top = tuple(plain(t) for t in asked_top.result(ASKS_WAIT_S))
        try:
            series, health = asked_series.result(ASKS_WAIT_S)
        except Exception as exc:  # the page goes on without the series
            notes.append(f"the ranks' step series could not be read ({exc})")
        try:
            targets = stragglers(health, events)
            if targets:
                odd_places = sample_places(client, client.probes(job_id), targets)
        except Exception as exc:  # the page goes on without it
            notes.append(f"the straggler's time could not be sampled ({exc})")
        try:
            artifacts = {**artifacts, **asked_memory.result(ASKS_WAIT_S)}
        except Exception as exc:  # the page goes on without it
            notes.append(f"the ranks' memory trend could not be read ({exc})")
        try:
            environment = tuple(plain(e) for e in asked_env.result(ASKS_WAIT_S))
        except Exception as exc:  # the page goes on without it
            notes.append(f"the ranks' environments could not be compared ({exc})")
        try:
            pending = unplaced.result(PENDING_WAIT_S)
        except Exception as exc:  # the page goes on without it
            notes.append(f"the work Ray has not placed could not be read ({exc})")
        if look_again:  # the second look, after the rest was read: see them move
            time.sleep(max(0.0, MOTION_GAP_S - (time.monotonic() - looked_at)))
            moving = moved(status.processes, client.probes(job_id, ["motion", "collectives"]))
        # who is alive, once more: a death the hub proved while the ranks were asked is in
        # this page, not the next one (the peers' failures arrive before the proof)
        [status] = job_statuses(address, this_job, client=client)
        processes = tuple(plain(p) for p in status.processes)
    found = _job_files(job_dir, files, series=not series, here=files_here)
    notes.extend(found.notes)
    if not series and found.series:  # the job is gone: its whole run from the step files
        series, health = found.series, found.health
    return RunData(
        job_id,
        f"the hub ({job_dir})",
        events,
        artifacts,
        files=tuple(files),
        processes=processes,
        deaths=status.deaths,
        first_death=status.first_death,
        died_at=status.died_at,
        moving=moving,
        odd_places=odd_places,
        hang=hang,
        stacks=stacks,
        health=health,
        top=top,
        series=series,
        series_from=found.series_from if series is found.series else "",
        traces=found.traces,
        environment=environment,
        pending=pending,
        notes=tuple(notes),
    )


class _Background:
    """`fn(*args)` on a daemon thread (one the CLI never waits for at exit)."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn, args), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            self._value = fn(*args)
        except BaseException as exc:  # handed to the caller
            self._error = exc

    def result(self, timeout: float) -> Any:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"no answer in {timeout:g} s")
        if self._error is not None:
            raise self._error
        return self._value


def _any_finding(reports: tuple[dict[str, Any], ...]) -> bool:
    return any(r.get("findings") for r in reports)


def _pending(address: str | None, job_id: str) -> tuple[dict[str, Any], ...]:
    """The job's actors, tasks and placement groups Ray has not placed, and why (the same
    read as `rankscope why-pending`); empty when all of its work is placed."""
    from rankscope.resources.collect import pending_report

    report = pending_report(address)
    mine = [v for v in report.verdicts if v.demand.job_id == job_id]
    return ({"verdicts": plain(mine), "notes": list(report.notes)},) if mine else ()


def _monitor(
    address: str | None, this_job: Selection, client: HubClient
) -> tuple[tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]]:
    """Every live rank's step series (one fan-out) and the monitor's findings over them."""
    from rankscope.monitor.collect import job_series
    from rankscope.report.trends import monitor_data

    [answers] = job_series(address, this_job, client=client).values()
    if not answers.asked:  # no live rank: no series, and no findings over none
        return (), ()
    return monitor_data([reply.payload for _, reply in answers.answered])


def _live_memory(client: Any, job_id: str) -> dict[str, Any]:
    """The ranks' host memory trend and its leak test, as a memory profile the Memory section
    reads: every rank's up to `LIVE_MEMORY_RANKS`, past it only the leaking ones."""
    from rankscope.memory.collect import collect

    probes = client.probes(job_id)
    job = collect(client, job_id, probes, history=True, points=MEMORY_POINTS)
    replies = list(job.replies.values())
    if len(replies) > LIVE_MEMORY_RANKS:
        replies = [r for r in replies if any(f.leak for f in r.leaks)]
    if not replies:
        return {}
    return {"memory-live": {"data": plain({"memory": job.view, "replies": replies})}}


def _job_files(
    job_dir: str, files: list[tuple[str, int]], *, series: bool, here: bool | None
) -> JobFiles:
    """The traces and step series, read here when the hub's run directory is on this machine,
    else on the hub's node; a failure costs them, with a note, never the page."""
    try:
        if os.path.isdir(job_dir) if here is None else here:
            return read_job_files(job_dir, files, series=series)
        return read_on_hub_node(job_dir, files, series=series)
    except Exception as exc:
        why = f"not read on the hub's node ({type(exc).__name__}: {exc})"[:200]
        traces = tuple({"name": n, "bytes": size, "error": why} for n, size in files if is_trace(n))
        return JobFiles(traces, notes=(f"the traces and step series were {why}",))


def _is_job_dir(path: str) -> bool:
    if not os.path.isdir(path):
        return False
    names = os.listdir(path)
    return "events.jsonl" in names or any(n.endswith(".json") for n in names)


def _last_written(job_dir: str) -> float:
    return max(os.path.getmtime(os.path.join(job_dir, n)) for n in os.listdir(job_dir))
