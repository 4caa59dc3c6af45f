"""The monitor's findings for the demo's faults that `rankscope monitor` finds.

`health` asks every rank for its series once the job has trained (the ranks stay up, as a
finished trainer waiting for its checkpoint would) and prints what `rankscope monitor` prints;
`named` is the pure part: which ranks the findings of one kind name, and at which steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rankscope.demo.session import DemoSession

if TYPE_CHECKING:
    from rankscope.monitor.model import Finding, FindingKind


def monitor_step(loop_step: int) -> int:
    """The monitor's number of the training loop's step `loop_step` (from 0): the nth call of
    `rankscope.step()` is step n."""
    return loop_step + 1


def named(findings: Sequence[Finding], kind: FindingKind) -> list[tuple[int, int | None]]:
    """(rank, step) of every finding of `kind`, sorted."""
    return sorted((r, f.step) for f in findings if f.kind == kind for r in f.ranks)


def health(session: DemoSession) -> tuple[Finding, ...]:
    """`rankscope monitor --job <this job>` after training: its findings, printed."""
    import ray

    from rankscope.monitor.collect import job_health
    from rankscope.monitor.render import render_health
    from rankscope.runtime.ask import Selection

    ray.get(session.runs)
    session.console.print(f"trained {session.steps} steps; `rankscope monitor`:\n")
    [job] = job_health(None, Selection(session.job_id))
    session.console.print(render_health(job))
    return job.findings
