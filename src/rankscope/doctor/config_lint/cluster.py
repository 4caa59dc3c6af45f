"""The cluster a config will run on: Ray's GPU resource per node, the models and memory
nvidia-smi reports there (by the doctor's node helper)."""

from __future__ import annotations

from rankscope.doctor.config_lint.model import ClusterShape
from rankscope.doctor.nodes import alive_nodes, run_on_nodes
from rankscope.doctor.preflight import probe

__all__ = ["cluster_shape"]

DEADLINE_S = 15.0


def cluster_shape(address: str | None) -> ClusterShape:
    from rankscope.runtime.client import connect

    connect(address)
    nodes = alive_nodes()
    probe.ship_by_value()
    answers = run_on_nodes(probe.gpus, deadline_s=DEADLINE_S, nodes=nodes)
    devices = [d for reply in answers.replies.values() for d in reply["devices"]]
    memory = [d["total_mib"] for d in devices if d.get("total_mib")]
    return ClusterShape(
        gpus_per_node=tuple(int(n.resources.get("GPU", 0)) for n in nodes),
        gpu_names=tuple(d["name"] for d in devices),
        gpu_memory_bytes=min(memory) * (1 << 20) if memory else None,
    )
