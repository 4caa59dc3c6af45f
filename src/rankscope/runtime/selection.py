"""Choosing which registered processes a command is about: by job, then by rank (pure)."""

from __future__ import annotations

from collections.abc import Iterable

from rankscope.errors import UserError
from rankscope.runtime.protocol import ProbeState, ProbeStatus


def select_jobs(
    probes: Iterable[ProbeStatus], job_id: str | None = None
) -> dict[str, list[ProbeStatus]]:
    """Probes grouped by job; without `job_id`, the jobs that still have live processes,
    or else the most recent job, so that a finished job can still be looked at."""
    by_job: dict[str, list[ProbeStatus]] = {}
    for p in probes:
        by_job.setdefault(p.context.job_id, []).append(p)
    if job_id is not None:
        if job_id not in by_job:
            known = ", ".join(sorted(by_job)) or "none"
            raise UserError(f"--job {job_id}: no such job registered (known jobs: {known})")
        return {job_id: _ordered(by_job[job_id])}
    live = {j: ps for j, ps in by_job.items() if any(p.state != ProbeState.DEAD for p in ps)}
    if live:
        return {j: _ordered(ps) for j, ps in sorted(live.items())}
    if not by_job:
        return {}
    latest = max(by_job, key=lambda j: max(p.registered_at for p in by_job[j]))
    return {latest: _ordered(by_job[latest])}


def filter_ranks(probes: list[ProbeStatus], ranks: frozenset[int] | None) -> list[ProbeStatus]:
    """Keep the processes whose rank is in `ranks` (all of them when `ranks` is None)."""
    if ranks is None:
        return probes
    return [p for p in probes if p.context.rank is not None and p.context.rank in ranks]


def _ordered(probes: list[ProbeStatus]) -> list[ProbeStatus]:
    return sorted(
        probes, key=lambda p: (p.context.rank is None, p.context.rank or 0, p.context.pid)
    )
