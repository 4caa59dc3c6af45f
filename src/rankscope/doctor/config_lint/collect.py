"""The cluster a config will run on: Ray's GPU resource per node, the models and memory
nvidia-smi reports there, and whether every node sees the checkpoint dir (a sentinel written on
the first node that has it, read back on all), by the doctor's node helper."""

from __future__ import annotations

import uuid

from rankscope.doctor.collect_nodes import NodeRef, alive_nodes, run_on_nodes
from rankscope.doctor.config_lint.model import ClusterShape
from rankscope.doctor.preflight import collect_node

__all__ = ["cluster_shape"]

DEADLINE_S = 15.0


def cluster_shape(address: str | None, shared_dir: str | None = None) -> ClusterShape:
    from rankscope.runtime.client import connect

    connect(address)
    nodes = alive_nodes()
    collect_node.ship_by_value()
    answers = run_on_nodes(collect_node.gpus, deadline_s=DEADLINE_S, nodes=nodes)
    devices = [d for reply in answers.replies.values() for d in reply["devices"]]
    memory = [d["total_mib"] for d in devices if d.get("total_mib")]
    return ClusterShape(
        gpus_per_node=tuple(int(n.resources.get("GPU", 0)) for n in nodes),
        gpu_names=tuple(d["name"] for d in devices),
        gpu_memory_bytes=min(memory) * (1 << 20) if memory else None,
        shared_seen=None if shared_dir is None else _sentinel(shared_dir, nodes),
    )


def _sentinel(directory: str, nodes: list[NodeRef]) -> dict[str, str]:
    """{node label: "seen" or why not}; a sentinel written where the directory exists first."""
    token = uuid.uuid4().hex
    name = f".rankscope-doctor-{token[:12]}"
    before = run_on_nodes(
        collect_node.read_sentinel, directory, name, deadline_s=DEADLINE_S, nodes=nodes
    )
    have = [n for n in nodes if before.replies.get(n.node_id, {}).get("exists")]
    if not have:
        return {n.label: "directory missing" for n in nodes}
    wrote = run_on_nodes(
        collect_node.write_sentinel, directory, name, token, deadline_s=DEADLINE_S, nodes=have[:1]
    )
    error = wrote.replies.get(have[0].node_id, "no answer") or None
    if error:
        return {n.label: f"not written on {have[0].label}: {error}" for n in nodes}
    read = run_on_nodes(
        collect_node.read_sentinel, directory, name, deadline_s=DEADLINE_S, nodes=nodes
    )
    run_on_nodes(
        collect_node.remove_sentinel, directory, name, deadline_s=DEADLINE_S, nodes=have[:1]
    )
    seen = {}
    for n in nodes:
        reply = read.replies.get(n.node_id)
        if reply is None:
            seen[n.label] = "no answer"
        elif reply.get("content") == token:
            seen[n.label] = "seen"
        else:
            seen[n.label] = (
                "directory exists, sentinel not there"
                if reply.get("exists")
                else ("directory missing")
            )
    return seen
