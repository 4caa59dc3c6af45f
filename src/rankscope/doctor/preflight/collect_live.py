"""What `rankscope doctor` adds beside a live job: the GPUs its processes share, and the work
Ray cannot place.

Doctor is a preflight, yet users run it while a job already runs (or hangs waiting for
resources). Two views of other features answer then: `memory --by-gpu` (which processes share
each physical GPU, asked through the probes) and `why-pending` (every pending task, actor and
placement group against every node, from Ray's state API). Each becomes one `Check`, so the
table, `--json` and `--html` show them like any other check. Neither is required: no hub (no
job yet) or no dashboard is a skipped check with its reason, never a failure of the doctor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rankscope.doctor.collect import job_environments
from rankscope.doctor.model import JobEnvironment
from rankscope.doctor.preflight.model import Check, Status
from rankscope.errors import NoHubError
from rankscope.memory.collect_by_gpu import JobGpus, collect_by_gpu
from rankscope.resources.collect import pending_report
from rankscope.resources.model import PendingReport, Verdict
from rankscope.runtime.ask import Selection
from rankscope.units import human_bytes

__all__ = ["gpu_sharing_check", "job_versions_check", "live_checks", "pending_check"]

VERSIONS = "versions in a live job"
GPUS = "GPUs shared by a live job"
PENDING = "work Ray cannot place"


def live_checks(address: str | None, dashboard_error: str | None) -> list[Check]:
    """The checks of a live cluster; each skipped, with why, when its source is absent
    (`dashboard_error`: the state API is not asked when the dashboard is known not to answer;
    pending work is then read from the GCS, actors and placement groups only)."""
    every_job = Selection()
    checks = [
        _guarded(VERSIONS, lambda: job_versions_check(job_environments(address, every_job))),
        _guarded(GPUS, lambda: gpu_sharing_check(collect_by_gpu(address, every_job))),
    ]
    state_api = dashboard_error is None
    pending = _guarded(PENDING, lambda: pending_check(pending_report(address, state_api=state_api)))
    return [*checks, pending]


def _guarded(name: str, check: Callable[[], Check]) -> Check:
    """`check()`, or the check skipped with why: no hub (no live job), or its source failed
    (the doctor's other checks stand without it)."""
    try:
        return check()
    except NoHubError:
        return Check(name, Status.SKIP, "no live job: no probe has started rankscope's hub")
    except Exception as exc:
        return Check(name, Status.SKIP, f"not read: {_first_line(exc)}")


def job_versions_check(jobs: Sequence[JobEnvironment]) -> Check:
    """The live job's own environment, as its processes loaded it (the `--runtime-env` of a
    job already running): FAIL when versions or NCCL/torch variables differ across the ranks
    of a group (`rankscope diagnose`'s comparison)."""
    evidence: dict[str, str] = {}
    findings: list[str] = []
    for job in jobs:
        if not job.processes:
            continue
        seen: dict[str, set[str]] = {}
        for p in job.processes:
            f = p.facts
            for name, value in (("python", f.python), ("torch", f.torch), ("ray", f.ray)):
                seen.setdefault(name, set()).add(value or "-")
        evidence[f"job {job.job_id}"] = f"{len(job.processes)} processes: " + ", ".join(
            f"{name} {'/'.join(sorted(values))}" for name, values in seen.items()
        )
        findings += [f"job {job.job_id}: {f.message}" for f in job.findings]
        if job.unanswered:
            evidence[f"job {job.job_id} no answer"] = ", ".join(job.unanswered)
    if not evidence:
        return Check(VERSIONS, Status.SKIP, "no live job's process answered")
    if findings:
        return Check(
            VERSIONS,
            Status.FAIL,
            "; ".join(findings),
            evidence,
            fix="give every rank the same environment (one runtime_env or image); "
            "`rankscope diagnose` lists each process",
        )
    return Check(VERSIONS, Status.OK, "every live job's ranks run the same versions", evidence)


def gpu_sharing_check(jobs: Sequence[JobGpus]) -> Check:
    """One row per GPU that a live job's processes use: its co-tenants, their memory and Ray
    shares; FAIL when a GPU is shared beyond its Ray resources or past the memory threshold."""
    evidence: dict[str, str] = {}
    flagged: list[str] = []
    for job in jobs:
        for gpu in job.gpus:
            tenants = ", ".join(
                f"{t.label} ({t.actor_class or '-'}"
                + (f", {human_bytes(t.memory)}" if t.memory is not None else "")
                + f", share {t.ray_share:g})"
                for t in gpu.tenants
            )
            where = f"job {job.job_id} {gpu.name}"
            evidence[where] = tenants + "".join(f"; {f}" for f in gpu.findings)
            if gpu.findings:
                flagged.append(f"{where}: {gpu.findings[0]}")
        for missing in job.unanswered:
            evidence[f"job {job.job_id} no answer"] = missing
    if not evidence:
        return Check(GPUS, Status.OK, "no live job's process uses a GPU")
    if flagged:
        return Check(
            GPUS,
            Status.FAIL,
            f"{len(flagged)} GPU(s) over-subscribed: " + "; ".join(flagged),
            evidence,
            fix="give the co-tenants fractional num_gpus that sum to 1 at most, or lower each "
            "one's memory (e.g. vLLM gpu_memory_utilization); `rankscope memory --by-gpu`",
        )
    used = sum(len(j.gpus) for j in jobs)
    return Check(GPUS, Status.OK, f"{used} GPU(s) in use, none over-subscribed", evidence)


def pending_check(report: PendingReport) -> Check:
    """FAIL when some pending work fits no node (it would wait forever), WARN when work waits
    for resources others hold, OK when nothing is pending."""
    read = "".join(f" ({note})" for note in report.notes)  # read without the dashboard
    if not report.verdicts:
        return Check(PENDING, Status.OK, f"nothing is pending{read}")
    evidence = {
        f"{v.demand.kind.value} {v.demand.name or v.demand.id}": f"{v.verdict.value}: {v.reason}"
        for v in report.verdicts
    }
    infeasible = report.infeasible
    waiting = [v for v in report.verdicts if v.verdict == Verdict.WAITING]
    summary = (
        f"{len(report.verdicts)} pending: {len(infeasible)} fit no node, {len(waiting)} wait{read}"
    )
    if infeasible:
        return Check(
            PENDING,
            Status.FAIL,
            summary,
            evidence,
            fix="these never start: ask for less, or add a node that has it "
            "(`rankscope why-pending` names the shortfall per node)",
        )
    return Check(PENDING, Status.WARN if waiting else Status.OK, summary, evidence)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]
