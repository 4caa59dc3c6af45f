"""Run one function on every alive Ray node, in parallel, under one deadline.

A reusable helper: the preflight doctor asks every node for its facts with it, and any other
feature that needs an answer from each node (a file on every node, a process table, a clock)
may reuse it. Each call is a zero-CPU Ray task pinned to its node with
`NodeAffinitySchedulingStrategy(node_id, soft=False)`, as `stacks/collect_pyspy.py` and
`runtime/liveness.py` pin theirs; nodes that do not answer by the deadline are named, never
waited for, and a node whose task raised is named with the reason in one line.

    answers = run_on_nodes(platform.node, deadline_s=10)
    answers.replies   # {node_id: result}; answers.missing: nodes past the deadline
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["NodeAnswers", "NodeRef", "alive_nodes", "run_on_nodes"]

T = TypeVar("T")


@dataclass(frozen=True)
class NodeRef:
    """One Ray node as the user knows it: its id, address, host name, and whether it is the head."""

    node_id: str
    address: str
    hostname: str
    is_head: bool = False
    resources: dict[str, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """`head 10.0.0.1 (1a2b3c4d)`: nodes of one machine (a test cluster) differ by id."""
        role = "head " if self.is_head else ""
        return f"{role}{self.address} ({self.node_id[:8]})"


@dataclass(frozen=True)
class NodeAnswers(Generic[T]):
    """What every node said: results by node id, nodes that raised (with the reason) and
    nodes that did not answer before the deadline; round trips measured by the caller's clock."""

    nodes: tuple[NodeRef, ...]
    replies: dict[str, T]
    failed: dict[str, str]
    missing: tuple[NodeRef, ...]
    sent_at: dict[str, float]
    received_at: dict[str, float]

    def node(self, node_id: str) -> NodeRef:
        return next(n for n in self.nodes if n.node_id == node_id)


def alive_nodes() -> list[NodeRef]:
    """The cluster's alive nodes, head first, then by address and id."""
    import ray

    nodes = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        resources = {str(k): float(v) for k, v in (n.get("Resources") or {}).items()}
        nodes.append(
            NodeRef(
                node_id=n["NodeID"],
                address=n.get("NodeManagerAddress", "?"),
                hostname=n.get("NodeManagerHostname", "?"),
                is_head=any(k.startswith("node:__internal_head__") for k in resources),
                resources=resources,
            )
        )
    return sorted(nodes, key=lambda n: (not n.is_head, n.address, n.node_id))


def run_on_nodes(
    fn: Callable[..., T],
    *args: Any,
    deadline_s: float,
    nodes: Sequence[NodeRef] | None = None,
    runtime_env: dict[str, Any] | None = None,
) -> NodeAnswers[T]:
    """`fn(*args)` on every node (default: every alive node) at once; wait at most `deadline_s`.

    `runtime_env` runs the tasks in that environment (a job's pip/uv/conda/container), which
    may take longer to start: give it a longer deadline. Tasks still running at the deadline
    are cancelled and their nodes listed in `missing`.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    targets = tuple(alive_nodes() if nodes is None else nodes)
    task = ray.remote(num_cpus=0, max_retries=0)(fn)
    options: dict[str, Any] = {}
    if runtime_env:
        options["runtime_env"] = runtime_env
    refs: dict[Any, str] = {}
    sent: dict[str, float] = {}
    for node in targets:
        strategy = NodeAffinitySchedulingStrategy(node.node_id, soft=False)
        sent[node.node_id] = time.time()
        refs[task.options(scheduling_strategy=strategy, **options).remote(*args)] = node.node_id
    end = time.monotonic() + deadline_s
    replies: dict[str, T] = {}
    failed: dict[str, str] = {}
    received: dict[str, float] = {}
    pending = list(refs)
    while pending:
        left = end - time.monotonic()
        if left <= 0:
            break
        done, pending = ray.wait(pending, num_returns=1, timeout=left)
        for ref in done:
            node_id = refs[ref]
            received[node_id] = time.time()
            try:
                replies[node_id] = ray.get(ref)
            except Exception as exc:  # the node refused work, or fn raised there
                failed[node_id] = _one_line(exc)
    for ref in pending:
        ray.cancel(ref, force=True)
    late = {refs[ref] for ref in pending}
    missing = tuple(n for n in targets if n.node_id in late)
    return NodeAnswers(targets, replies, failed, missing, sent, received)


def _one_line(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)  # RayTaskError wraps the task's own exception
    inner = cause if isinstance(cause, BaseException) else exc
    text = str(inner).strip().splitlines()
    return f"{type(inner).__name__}: {text[-1] if text else ''}".rstrip(": ")
