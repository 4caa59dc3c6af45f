"""The CLI side of `rankscope logs`: one task per node reads the files there, then the lines are
merged in time order and folded across ranks."""

from __future__ import annotations

from rankscope.logs.analysis import LogFilter, fold_partials, merge_folds, merge_lines
from rankscope.logs.gone import gone_node_logs
from rankscope.logs.model import JobLogs, LogLine, NodeLogs
from rankscope.runtime.ask import Selection, select
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeStatus

__all__ = ["collect_logs", "read_job_logs", "read_new_lines"]

MAX_LINES_PER_NODE = 1_000_000
MAX_FOLDS_PER_NODE = 100_000
"""Folded (no --raw): a fold holds a line and its spreads, and a log that does not template
well makes one a line, so fewer of them."""
NODE_READ_TIMEOUT_S = 60.0


def collect_logs(
    address: str | None, selection: Selection, log_filter: LogFilter, *, raw: bool
) -> list[JobLogs]:
    """Every selected job's logs, read on their nodes (`log_filter` picks the ranks)."""
    client = HubClient.attach(address)
    return [
        read_job_logs(job_id, probes, log_filter, raw=raw)
        for job_id, probes in select(client, selection).items()
    ]


def read_job_logs(
    job_id: str, probes: list[ProbeStatus], log_filter: LogFilter, *, raw: bool
) -> JobLogs:
    """Read on every live node (one task per node address: nodes that share a machine share
    its files) and add what the hub last heard from ranks on nodes that are gone; unless `raw`,
    each node folds its files' lines and only the folds are merged here."""
    import ray

    from rankscope.logs.collect_reader import read_node_remote

    targets = _node_targets(probes, ray.nodes())
    bound = MAX_LINES_PER_NODE if raw else MAX_FOLDS_PER_NODE
    refs = {
        ip: read_node_remote(node_id, job_id, pids, log_filter, bound, fold=not raw)
        for ip, (node_id, pids) in targets.items()
    }
    results: list[NodeLogs] = []
    errors: list[str] = []
    for ip, ref in refs.items():
        try:
            results.append(ray.get(ref, timeout=NODE_READ_TIMEOUT_S))
        except Exception as exc:
            errors.append(f"node {ip}: could not read its logs: {type(exc).__name__}")
    gone_lines, notes = gone_node_logs(probes, set(targets), log_filter)
    if raw:
        lines, folds = merge_lines([*(r.lines for r in results), gone_lines]), []
    else:  # each node folded its files' lines: merge those folds (and the gone ranks')
        lines, folds = [], merge_folds([*(r.folds for r in results), fold_partials(gone_lines)])
    return JobLogs(
        job_id=job_id,
        folds=tuple(folds),
        lines=tuple(lines),
        files=sum(len(r.files) for r in results),
        skipped=sum(r.skipped for r in results),
        errors=tuple(errors + [e for r in results for e in r.errors]),
        notes=tuple(notes),
    )


def read_new_lines(
    job_id: str,
    probes: list[ProbeStatus],
    log_filter: LogFilter,
    offsets: dict[str, dict[str, int]],
) -> tuple[list[LogLine], list[str]]:
    """The lines written since the last call (all of them on the first), merged in time order,
    and what could not be read; `offsets` (node address -> file -> bytes read) is advanced."""
    import ray

    from rankscope.logs.collect_reader import read_node_remote

    targets = _node_targets(probes, ray.nodes())
    refs = {
        ip: read_node_remote(
            node_id, job_id, pids, log_filter, MAX_LINES_PER_NODE, offsets=offsets.get(ip, {})
        )
        for ip, (node_id, pids) in targets.items()
    }
    results: list[NodeLogs] = []
    errors: list[str] = []
    for ip, ref in refs.items():
        try:
            result: NodeLogs = ray.get(ref, timeout=NODE_READ_TIMEOUT_S)
        except Exception as exc:
            errors.append(f"node {ip}: could not read its logs: {type(exc).__name__}")
            continue
        results.append(result)
        offsets[ip] = result.offsets  # files gone since drop out
        errors.extend(result.errors)
    return merge_lines(r.lines for r in results), errors


def _node_targets(
    probes: list[ProbeStatus], nodes: list[dict[str, object]]
) -> dict[str, tuple[str, dict[int, int | None]]]:
    """Node address -> (a live node id there, {pid: rank} of the job's processes there)."""
    targets: dict[str, tuple[str, dict[int, int | None]]] = {}
    for node in nodes:
        if node.get("Alive") and str(node.get("NodeManagerAddress")) not in targets:
            targets[str(node["NodeManagerAddress"])] = (str(node["NodeID"]), {})
    for p in probes:
        target = targets.get(p.context.node_ip)
        if target is not None:
            target[1][p.context.pid] = p.context.rank
    return targets
