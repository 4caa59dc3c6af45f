"""Choosing which registered processes a command is about: by job, group and rank (pure).

A rank is unique within its group (`RankContext.group`), not within a job: verl runs several
worker groups in one job, Ray Train restarts a group with the same ranks.
"""

from __future__ import annotations

import dataclasses
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
    by_job = {job: without_inherited_ranks(ps) for job, ps in by_job.items()}
    if job_id is not None:
        if job_id not in by_job:
            known = ", ".join(sorted(by_job)) or "none"
            raise UserError(
                f"--job {job_id}: no such job registered (known jobs: {known}); a job that "
                "just started registers as its first worker starts: run it again then"
            )
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


def by_group(probes: Iterable[ProbeStatus]) -> dict[str | None, list[ProbeStatus]]:
    """Ranked processes by their group (None: ranks whose group is unknown), in order."""
    groups: dict[str | None, list[ProbeStatus]] = {}
    for p in probes:
        if p.context.rank is not None:
            groups.setdefault(p.context.group, []).append(p)
    return {g: _ordered(ps) for g, ps in sorted(groups.items(), key=lambda kv: kv[0] or "")}


def filter_group(probes: list[ProbeStatus], group: str | None) -> list[ProbeStatus]:
    """The processes of the group named `group` (a unique prefix is enough); all when None."""
    if group is None:
        return probes
    names = sorted({p.context.group for p in probes if p.context.group})
    chosen = [n for n in names if n == group] or [n for n in names if n.startswith(group)]
    if len(chosen) != 1:
        what = "matches several groups" if chosen else "matches no group"
        raise UserError(
            f"--group {group}: {what} of this job (its groups: {', '.join(names) or 'none'})"
        )
    return [p for p in probes if p.context.group == chosen[0]]


def filter_jobs_by_group(
    jobs: dict[str, list[ProbeStatus]], group: str | None
) -> dict[str, list[ProbeStatus]]:
    """Each job's processes of the group named `group` (`filter_group`); of several live jobs,
    those that have it: `--group actor` without `--job` finds the one job running the actors
    (another trainer's job on the cluster does not make it fail)."""
    if group is None or len(jobs) <= 1:
        return {j: filter_group(probes, group) for j, probes in jobs.items()}
    kept = {}
    for job_id, probes in jobs.items():
        try:
            kept[job_id] = filter_group(probes, group)
        except UserError:
            continue  # not this job's group, or not a unique one in it
    if kept:
        return kept
    names = sorted({p.context.group for ps in jobs.values() for p in ps if p.context.group})
    raise UserError(
        f"--group {group}: matches no single group of the {len(jobs)} live jobs "
        f"(their groups: {', '.join(names) or 'none'}); name one, or choose a job with --job"
    )


def without_inherited_ranks(probes: list[ProbeStatus]) -> list[ProbeStatus]:
    """A process whose rank comes from RANK in its environment, while a live process of its
    job holds that rank of that group in torch.distributed, inherited the variable (an actor a
    verl worker starts gets the worker's env_vars): it is shown without a rank."""
    held = {
        (p.context.group, p.context.rank)
        for p in probes
        if p.context.rank_source not in ("env", "none") and p.state != ProbeState.DEAD
    }
    out = []
    for p in probes:
        ctx = p.context
        if ctx.rank_source == "env" and (ctx.group, ctx.rank) in held:
            plain = dataclasses.replace(ctx, rank=None, group=None, rank_source="inherited")
            p = dataclasses.replace(p, info=dataclasses.replace(p.info, context=plain))
        out.append(p)
    return out


def _ordered(probes: list[ProbeStatus]) -> list[ProbeStatus]:
    return sorted(
        probes, key=lambda p: (p.context.rank is None, p.context.rank or 0, p.context.pid)
    )
