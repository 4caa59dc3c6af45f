"""Gathering stacks cluster-wide: ask every probe, then py-spy the ones that did not answer.

Child processes of the probed workers (a vLLM or SGLang engine a rollout worker started, which
the setup hook never reaches) are py-spied too, labelled as their parent rank's children.
"""

from __future__ import annotations

import dataclasses
import math
import time

import ray

from rankscope.errors import UserError
from rankscope.runtime import deadlines
from rankscope.runtime.ask import Answers, Command, Selection, ask, select
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import CommandResult, ProbeStatus
from rankscope.stacks.analysis import (
    confirm_sample,
    confirmed,
    confirmed_by_sample,
    group_stacks,
    waited_long,
)
from rankscope.stacks.collect_pyspy import PARALLEL_DUMPS, PYSPY_TIMEOUT_S, dump_on_node
from rankscope.stacks.model import ChildProcess, ProcessStacks, StackFinding, StackReport

CONFIRM_AFTER_S = 1.0
"""When the first look finds ranks stuck, look again: each rank takes its second stacks this
long after its first, on its own clock (`capture.LookSpacing`); a wait that is part of normal
progress has moved on by then, a stuck group has not. Not when the waiting ranks have
waited `analysis.LONG_WAIT_S` already, as their recorders say."""
CONFIRM_ALL_UPTO = 256
"""Up to this many processes the second look takes them all again; past it, a sample of each
finding's ranks (`analysis.confirm_sample`): at 4,096 ranks a second whole look costs as much
hub time as the first (docs/PERFORMANCE.md, Scale)."""
TASK_START_ALLOWANCE_S = 20.0
"""A py-spy task may first need a new Ray worker process on a busy node (seconds each)."""


def collect_stacks(
    client: HubClient,
    probes: list[ProbeStatus],
    *,
    deadline_s: float = deadlines.STACKS_S,
    children: bool = True,
    apart_s: float = 0.0,
) -> list[ProcessStacks]:
    """Stacks of every process in `probes`, by probe when it answers, else by py-spy; and of
    their child processes by py-spy (those py-spy cannot read, not Python, are left out).
    With `apart_s`, each probe takes them that long after its previous answer at most (the
    deadline grows by as much)."""
    commands = [Command("stacks", {"apart_s": apart_s})]
    if children:
        commands.append(Command("children"))
    asked = ask(client, probes, commands, deadline_s + apart_s)  # one round trip per probe
    stacks = asked[0]
    gathered = [_answered(status, reply) for status, reply in stacks.answered]
    gathered.extend(pyspy_all(unanswered(stacks)))
    if children:
        answered = {status.info.probe_id: status for status, _ in stacks.answered}
        gathered.extend(children_stacks(asked[1], answered))
    now = time.time()
    gathered.extend(
        ProcessStacks(p, (), "none", f"process is dead ({_why_dead(p, now)})") for p in stacks.dead
    )
    return gathered


def _answered(status: ProbeStatus, result: CommandResult) -> ProcessStacks:
    """A probe's own stacks, with its progress as it answered: the registry's row is from its
    last heartbeat, up to the hub's interval old (25 s at 4,096 ranks), and every rank of a
    healthy job would look as if it had stopped stepping."""
    if result.progress is not None:
        status = dataclasses.replace(status, progress=result.progress)
    return ProcessStacks(status, tuple(result.payload), "probe", taken_at=result.answered_at)


def unanswered(answers: Answers) -> list[tuple[ProbeStatus, str]]:
    """The probes that failed or stayed silent, and why: py-spy's targets."""
    return answers.unanswered("probe failed: {error}", "probe did not answer within {deadline}s")


def _why_dead(probe: ProbeStatus, now: float) -> str:
    """The hub's reason ("node gone: ..."), else how long ago it was last heard from."""
    return probe.reason or f"last heard {now - probe.last_seen:.0f}s ago"


def children_stacks(asked: Answers, by_id: dict[str, ProbeStatus]) -> list[ProcessStacks]:
    """py-spy the child processes `asked` (the `children` command) found of the ranks in
    `by_id`."""
    targets = [
        (_as_child(by_id[status.info.probe_id], child), "")
        for status, reply in asked.answered
        if status.info.probe_id in by_id
        for child in reply.payload
    ]
    parent_of = {
        child.info.probe_id: by_id[child.info.probe_id.split("/")[0]] for child, _ in targets
    }
    return [
        dataclasses.replace(stacks, parent=parent_of[stacks.status.info.probe_id])
        for stacks in pyspy_all(targets)
        if stacks.source == "py-spy"
    ]


def _as_child(parent: ProbeStatus, child: ChildProcess) -> ProbeStatus:
    """The child seen through its parent's record: same node and job, its own pid, no rank."""
    context = dataclasses.replace(
        parent.context, pid=child.pid, rank=None, local_rank=None, actor_id=None,
        actor_class=child.name, task_id=None,
    )  # fmt: skip
    info = dataclasses.replace(
        parent.info, probe_id=f"{parent.info.probe_id}/{child.pid}", context=context
    )
    return dataclasses.replace(parent, info=info)


MAX_PYSPY = 64
"""Processes one look py-spies at most. When the hub is overloaded, thousands of probes can miss
the deadline at once, and a py-spy task for each would make `stacks` ten times slower
(docs/PERFORMANCE.md, Scale). The others are reported without a stack, and why."""


def pyspy_all(targets: list[tuple[ProbeStatus, str]]) -> list[ProcessStacks]:
    """py-spy the first MAX_PYSPY targets in parallel: one task per node, pinned to it."""
    if not targets:
        return []
    out = [
        ProcessStacks(status, (), "none", f"{why}; not py-spied: {len(targets)} were silent")
        for status, why in targets[MAX_PYSPY:]
    ]
    by_node: dict[str, list[tuple[ProbeStatus, str]]] = {}
    for status, why in targets[:MAX_PYSPY]:
        by_node.setdefault(status.context.node_id, []).append((status, why))
    refs = {
        dump_on_node(node_id, [s.context.pid for s, _ in on_node]): on_node
        for node_id, on_node in by_node.items()
    }
    rounds = max(math.ceil(len(on_node) / PARALLEL_DUMPS) for on_node in by_node.values())
    timeout = PYSPY_TIMEOUT_S * rounds + TASK_START_ALLOWANCE_S
    ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
    for ref, on_node in refs.items():
        if ref not in ready:
            late = f"py-spy's task did not finish within {timeout:.0f}s"
            out.extend(ProcessStacks(s, (), "none", f"{why}; {late}") for s, why in on_node)
            ray.cancel(ref, force=True)
            continue
        try:
            dumps = ray.get(ref)
        except Exception as exc:
            reason = str(getattr(exc, "cause", None) or exc).strip().splitlines()[-1]
            out.extend(ProcessStacks(s, (), "none", f"{why}; {reason}") for s, why in on_node)
            continue
        for status, why in on_node:
            dump = dumps.get(status.context.pid, "py-spy gave nothing")
            if isinstance(dump, str):
                out.append(ProcessStacks(status, (), "none", f"{why}; {dump}"))
            else:
                out.append(ProcessStacks(status, dump, "py-spy", why))
    return out


def _look_again(
    client: HubClient,
    job_id: str,
    report: StackReport,
    settled: tuple[StackFinding, ...],
    chosen: list[ProbeStatus],
    first: list[ProcessStacks],
    deadline_s: float,
    confirm_after_s: float = CONFIRM_AFTER_S,
) -> StackReport:
    """`report` with its findings that are not `settled` kept only when a second look, each
    rank's `confirm_after_s` after its first, sees them again."""
    pending = dataclasses.replace(
        report, findings=tuple(f for f in report.findings if f not in settled)
    )
    sampled = len(chosen) > CONFIRM_ALL_UPTO
    if sampled:  # a sample of each finding's ranks again
        sample = confirm_sample(pending)
        chosen = [p for p in chosen if (p.context.group, p.context.rank) in sample]
    again = collect_stacks(
        client, chosen, deadline_s=deadline_s, children=False, apart_s=confirm_after_s
    )
    if sampled:
        seen = confirmed_by_sample(pending, group_stacks(job_id, again))
    else:  # their child processes as the first look saw them (a fan-out fewer)
        children = [s for s in first if s.parent is not None]
        seen = confirmed(pending, group_stacks(job_id, again + children))
    findings = tuple(f for f in report.findings if f in settled or f in seen.findings)
    return dataclasses.replace(seen, findings=findings, looks=2)


def stack_reports(
    address: str | None,
    selection: Selection,
    *,
    deadline_s: float = deadlines.STACKS_S,
    confirm_after_s: float = CONFIRM_AFTER_S,
    client: HubClient | None = None,
) -> list[StackReport]:
    """`rankscope stacks`: every selected job's processes, their stacks grouped, and the ranks
    stuck waiting for a rank of their group that is elsewhere (seen in two looks, or in one
    when the waiting ranks' recorders say they have waited LONG_WAIT_S)."""
    client = client or HubClient.attach(address)
    reports = []
    jobs = select(client, selection, summaries=[])  # stacks read none: not MBs at 4,096 ranks
    for job_id, chosen in jobs.items():
        if not chosen:
            if len(jobs) > 1:
                continue  # another live job has them
            raise UserError(
                f"--ranks {selection.ranks}: no registered process of job {job_id} has those ranks"
            )
        first = collect_stacks(client, chosen, deadline_s=deadline_s)
        report = group_stacks(job_id, first)
        settled = waited_long(report)  # the rest: each rank looked at again a second later
        if len(settled) < len(report.findings):
            report = _look_again(
                client, job_id, report, settled, chosen, first, deadline_s, confirm_after_s
            )
        reports.append(report)
    if selection.wanted is not None and not reports:
        raise UserError(
            f"--ranks {selection.ranks}: no registered process of any live job has those ranks"
        )
    return reports
