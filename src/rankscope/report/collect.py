"""Gathering one job's data for its report: the run directory, and the hub when it is live.

A run directory is `<run_dir>/<job>/` (events.jsonl and the JSON reports features wrote) or
the `<run_dir>` above it. Without a path, the events and reports come through the hub, which
reads them on its node (the CLI may run on another machine), with a live snapshot of the job.
"""

from __future__ import annotations

import os
from typing import Any

from rankscope.errors import UserError
from rankscope.report.model import RunData
from rankscope.runtime.run_dir import read_reports, tail_events
from rankscope.serialize import plain

EVENT_LIMIT = 20_000
EVERY_KIND = [""]
"""Events of every kind, the hub's records of who is who (`probe.registered`) included."""
"""Events read at most (the newest): enough for a run's story, bounded for huge runs."""
HANG_MIN_WAIT_S = 5.0
"""As `rankscope hang`'s default: a shorter wait in a collective is not yet a hang."""


def collect_run(
    path: str | None, address: str | None, job: str | None, *, live: bool = True
) -> RunData:
    """From a run directory when `path` is given, else through the hub (with a live snapshot)."""
    if path is not None:
        job_dir = find_job_dir(path, job)
        if job_dir is None:
            return RunData(job_id=job or "?", source=os.path.abspath(path))
        run_dir, job_id = os.path.split(job_dir)
        events = tuple(tail_events(run_dir, job_id, EVERY_KIND, EVENT_LIMIT))
        artifacts, skipped, files = read_reports(run_dir, job_id)
        return RunData(
            job_id,
            os.path.abspath(job_dir),
            events,
            artifacts,
            files=tuple(files),
            notes=tuple(skipped),
        )
    return _from_hub(address, job, live=live)


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


def _from_hub(address: str | None, job: str | None, *, live: bool) -> RunData:
    from rankscope.hang.collect import hang_reports
    from rankscope.monitor.collect import job_health, tops
    from rankscope.runtime.client import HubClient
    from rankscope.stacks.collect import stack_reports
    from rankscope.status.collect import job_statuses

    client = HubClient.attach(address)
    job_id = next(iter(client.jobs(job)))
    events = tuple(client.events(job_id, EVERY_KIND, EVENT_LIMIT))
    artifacts, skipped, files = client.reports(job_id)  # read on the hub's node, wherever it is
    job_dir = os.path.join(client.info().run_dir, job_id)
    [status] = job_statuses(address, job_id)
    processes = tuple(plain(p) for p in status.processes)
    alive = any(p.get("state") != "dead" for p in processes)
    hang: tuple[dict[str, Any], ...] = ()
    stacks: tuple[dict[str, Any], ...] = ()
    health: tuple[dict[str, Any], ...] = ()
    top: tuple[dict[str, Any], ...] = ()
    if live and alive:
        hang = tuple(plain(r) for r in hang_reports(address, job_id, HANG_MIN_WAIT_S))
        stacks = tuple(plain(r) for r in stack_reports(address, job_id, None, client=client))
        health = tuple(plain(h) for h in job_health(address, job_id))
        top = tuple(plain(t) for t in tops(client, job_id))
    return RunData(
        job_id,
        f"the hub ({job_dir})",
        events,
        artifacts,
        files=tuple(files),
        processes=processes,
        deaths=status.deaths,
        first_death=status.first_death,
        hang=hang,
        stacks=stacks,
        health=health,
        top=top,
        notes=tuple(skipped),
    )


def _is_job_dir(path: str) -> bool:
    if not os.path.isdir(path):
        return False
    names = os.listdir(path)
    return "events.jsonl" in names or any(n.endswith(".json") for n in names)


def _last_written(job_dir: str) -> float:
    return max(os.path.getmtime(os.path.join(job_dir, n)) for n in os.listdir(job_dir))
