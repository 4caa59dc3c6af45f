"""The CLI side of `rankscope doctor`: ask every alive node, then Ray itself, then check.

Three rounds of pinned tasks (`doctor.collect_nodes.run_on_nodes`), each under the deadline: the
shared-file-system sentinel written on the head node, every node's facts (in the job's
environment with `--runtime-env`), and a clock round on the now-warm workers, whose round trips
bound each node's clock offset.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, replace
from typing import Any

from rankscope.doctor.collect_nodes import NodeAnswers, NodeRef, alive_nodes, run_on_nodes
from rankscope.doctor.preflight import collect_node
from rankscope.doctor.preflight.checks import run_checks
from rankscope.doctor.preflight.collect_live import live_checks
from rankscope.doctor.preflight.model import ClusterFacts, NodeFacts, PreflightReport
from rankscope.errors import UserError

__all__ = ["PreflightOptions", "preflight"]

DASHBOARD_TIMEOUT_S = 2.0
SENTINEL_DEADLINE_S = 10.0


@dataclass(frozen=True)
class PreflightOptions:
    """What `rankscope doctor` was asked; validates itself."""

    address: str | None = None
    shared_path: str | None = None
    runtime_env: dict[str, Any] | None = None
    runtime_env_file: str | None = None
    deadline_s: float = 30.0
    min_driver: str = "525.60.11"

    def __post_init__(self) -> None:
        if self.deadline_s <= 0:
            raise UserError(f"--deadline {self.deadline_s}: must be > 0 seconds")


def preflight(options: PreflightOptions) -> PreflightReport:
    """Connect, ask every alive node, check; the report names nodes that did not answer."""
    from rankscope.runtime.client import connect

    connect(options.address)
    nodes = alive_nodes()
    cluster = _cluster_facts(options, nodes)
    collect_node.ship_by_value()
    paths = {"ray temp dir": _ray_temp_dir()}
    run_dir = os.environ.get("RANKSCOPE_RUN_DIR")
    if run_dir:
        paths["run dir"] = run_dir
    answers = run_on_nodes(
        collect_node.node_facts,
        paths,
        options.shared_path,
        deadline_s=options.deadline_s,
        nodes=nodes,
        runtime_env=options.runtime_env,
    )
    facts = [
        NodeFacts.from_probe(n.label, n.node_id, answers.replies[n.node_id], n.resources)
        for n in nodes
        if n.node_id in answers.replies
    ]
    if options.shared_path is not None:
        by_id = {n.node_id: n for n in nodes}
        cluster, facts = _shared_fs(options.shared_path, cluster, facts, by_id)
    facts = _with_clocks(facts, [n for n in nodes if n.node_id in answers.replies], options)
    unanswered = tuple(
        [f"{n.label}: no answer within {options.deadline_s:g} s" for n in answers.missing]
        + [f"{answers.node(i).label}: {why}" for i, why in answers.failed.items()]
    )
    checks = run_checks(facts, cluster) + live_checks(options.address, _no_dashboard(cluster))
    return PreflightReport(cluster, tuple(facts), tuple(checks), unanswered)


def _no_dashboard(cluster: ClusterFacts) -> str | None:
    """Why Ray's state API cannot answer, or None when the dashboard answered."""
    if cluster.dashboard_url is None:
        return "the cluster runs without it"
    return cluster.dashboard_error


def clock_offsets(answers: NodeAnswers[float]) -> dict[str, tuple[float, float]]:
    """(node clock - our clock at the round trip's midpoint, half the round trip) by node id."""
    found = {}
    for node_id, their in answers.replies.items():
        sent, received = answers.sent_at[node_id], answers.received_at[node_id]
        found[node_id] = (their - (sent + received) / 2, (received - sent) / 2)
    return found


def _with_clocks(
    facts: list[NodeFacts], nodes: list[NodeRef], options: PreflightOptions
) -> list[NodeFacts]:
    best: dict[str, tuple[float, float]] = {}
    for _ in range(3):  # the tightest of three round trips on warm workers
        answers = run_on_nodes(
            collect_node.clock, deadline_s=min(options.deadline_s, 5.0), nodes=nodes
        )
        for node_id, (offset, error) in clock_offsets(answers).items():
            if node_id not in best or error < best[node_id][1]:
                best[node_id] = (offset, error)
    return [
        replace(f, clock_offset_s=best[f.node_id][0], clock_error_s=best[f.node_id][1])
        if f.node_id in best
        else f
        for f in facts
    ]


def _shared_fs(
    shared_path: str, cluster: ClusterFacts, facts: list[NodeFacts], nodes: dict[str, NodeRef]
) -> tuple[ClusterFacts, list[NodeFacts]]:
    """A sentinel written on the first node (head first) that has the directory, then read
    back on every node: each node's `shared` says whether it saw it."""
    token = uuid.uuid4().hex
    name = f".rankscope-doctor-{token[:12]}"
    have = [f for f in facts if (f.shared or {}).get("exists")]
    if not have:
        return replace(
            cluster, sentinel_write_error="the directory exists on no node", sentinel_token=token
        ), facts
    writer = nodes[have[0].node_id]
    wrote = run_on_nodes(
        collect_node.write_sentinel,
        shared_path,
        name,
        token,
        deadline_s=SENTINEL_DEADLINE_S,
        nodes=[writer],
    )
    error = wrote.replies.get(writer.node_id) or wrote.failed.get(writer.node_id)
    if writer.node_id not in wrote.replies and error is None:
        error = f"no answer within {SENTINEL_DEADLINE_S:g} s"
    cluster = replace(
        cluster, sentinel_writer=writer.label, sentinel_write_error=error, sentinel_token=token
    )
    if error:
        return cluster, facts
    read = run_on_nodes(
        collect_node.read_sentinel,
        shared_path,
        name,
        deadline_s=SENTINEL_DEADLINE_S,
        nodes=[nodes[f.node_id] for f in facts],
    )
    run_on_nodes(
        collect_node.remove_sentinel,
        shared_path,
        name,
        deadline_s=SENTINEL_DEADLINE_S,
        nodes=[writer],
    )
    return cluster, [replace(f, shared=read.replies.get(f.node_id, f.shared)) for f in facts]


def _cluster_facts(options: PreflightOptions, nodes: list[NodeRef]) -> ClusterFacts:
    import ray

    url, error = _dashboard()
    return ClusterFacts(
        address=ray.get_runtime_context().gcs_address,
        token_auth=_token_auth(),
        dashboard_url=url,
        dashboard_error=error,
        shared_path=options.shared_path,
        min_driver=options.min_driver,
        runtime_env=options.runtime_env_file,
    )


def _token_auth() -> bool | None:
    try:
        from ray._private.authentication.authentication_utils import is_token_auth_enabled

        return bool(is_token_auth_enabled())
    except Exception:
        return None


def _dashboard() -> tuple[str | None, str | None]:
    """The dashboard's URL and, when it does not answer, why (a 401 is an answer)."""
    import urllib.error
    import urllib.request

    try:
        from ray._private.worker import get_dashboard_url

        url = get_dashboard_url()
    except Exception:
        url = None
    if not url:
        return None, None
    full = url if "://" in url else f"http://{url}"
    try:
        with urllib.request.urlopen(f"{full}/api/version", timeout=DASHBOARD_TIMEOUT_S):
            pass
    except urllib.error.HTTPError:
        pass  # it answered (token auth refuses us without one)
    except Exception as exc:
        return full, f"{type(exc).__name__}: {exc}"
    return full, None


def _ray_temp_dir() -> str:
    try:
        from ray._private import worker

        return str(worker._global_node.get_temp_dir_path())  # type: ignore[attr-defined]
    except Exception:
        return os.environ.get("RAY_TMPDIR", "/tmp/ray")
