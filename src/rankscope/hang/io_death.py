"""Why a registered process died: Ray's death cause, its last log lines, the OOM killers.

Best effort and bounded in time: each source that cannot answer (node gone, no permission to
read the kernel log) is skipped and the others still speak.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rankscope.hang.model import Death, DeathKind
from rankscope.runtime.protocol import ProbeStatus

LOG_LINES = 5
NODE_TASK_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class NodeForensics:
    """What the dead process's node still has: its log tail, and the kernel's OOM verdict."""

    last_lines: tuple[str, ...]
    kernel_oom: bool | None
    """True/False when the kernel log could be read, None when it could not."""


_REASONS = {
    "WORKER_DIED": DeathKind.EXITED,
    "RAY_KILL": DeathKind.KILLED,
    "OWNER_DIED": DeathKind.OWNER_DIED,
    "NODE_DIED": DeathKind.NODE_DIED,
}
_RAY_MARKERS = (":job_id:", ":actor_name:", ":task_name:")
"""Lines Ray writes into worker logs to tag what ran; not what the process said."""


def find_deaths(dead: Sequence[ProbeStatus]) -> dict[str, Death]:
    """probe_id -> how, when and why that process died."""
    pids_by_node: dict[str, set[int]] = {}
    for p in dead:
        pids_by_node.setdefault(p.context.node_id, set()).add(p.context.pid)
    refs = {node: _forensics_on_node(node, sorted(pids)) for node, pids in pids_by_node.items()}
    ready, _ = (
        ray.wait(list(refs.values()), num_returns=len(refs), timeout=NODE_TASK_TIMEOUT_S)
        if refs
        else ([], [])
    )
    by_node: dict[str, dict[int, NodeForensics]] = {}
    for node, ref in refs.items():
        if ref in ready:
            with contextlib.suppress(Exception):
                by_node[node] = ray.get(ref)
    unnamed = [p for p in dead if not p.context.actor_id]
    by_pid = _actors_by_pid() if unnamed else {}
    out = {}
    for p in dead:
        actor_id = p.context.actor_id or by_pid.get((p.context.node_ip, p.context.pid))
        kind, said, died_at = ray_death(actor_id) if actor_id else (DeathKind.UNKNOWN, "", None)
        if p.reason and kind == DeathKind.UNKNOWN:  # the hub's "node gone: ..." (runtime.registry)
            kind = DeathKind.NODE_DIED
        parts = [p.reason, said]
        forensics = by_node.get(p.context.node_id, {}).get(p.context.pid)
        if forensics is not None:
            if forensics.kernel_oom:
                kind = DeathKind.OUT_OF_MEMORY
                parts.append("the kernel's OOM killer took it (dmesg)")
            if forensics.last_lines:
                parts.append("last log lines: " + " | ".join(forensics.last_lines))
        else:
            parts.append("its node did not answer (node down?)")
        out[p.info.probe_id] = Death(kind, "; ".join(x for x in parts if x), died_at)
    return out


def explain_deaths(dead: Sequence[ProbeStatus]) -> dict[str, str]:
    """probe_id -> one line on why that process died."""
    return {probe_id: death.cause for probe_id, death in find_deaths(dead).items()}


def ray_death(actor_id: str) -> tuple[DeathKind, str, float | None]:
    """Ray's own account (GCS actor table): how it ended, in one line, and when."""
    try:
        from ray._private import state

        info = state.actors(actor_id)
        cause = info.get("DeathCause")
    except Exception:
        return DeathKind.UNKNOWN, "", None
    end_ms = info.get("EndTime") or 0
    died_at = end_ms / 1000.0 if end_ms else None
    if cause is None:
        return DeathKind.UNKNOWN, "", died_at
    if cause.HasField("oom_context"):
        return (
            DeathKind.OUT_OF_MEMORY,
            "Ray's memory monitor killed it (node out of memory): "
            + _first_sentence(cause.oom_context.error_message),
            died_at,
        )
    if cause.HasField("actor_died_error_context"):
        context = cause.actor_died_error_context
        reason = type(context).Reason.Name(context.reason)
        return _REASONS.get(reason, DeathKind.UNKNOWN), _ray_sentence(context), died_at
    return DeathKind.UNKNOWN, _first_sentence(str(cause)), died_at


def _ray_sentence(context: Any) -> str:
    """`Ray: worker died (SYSTEM_ERROR): Worker unexpectedly exits ...` from Ray's message."""
    message = context.error_message
    exit_type = re.search(r"Worker exit type: (\w+)", message)
    detail = re.search(r"Worker exit detail: (.*)", message, re.DOTALL)
    if exit_type is not None:
        what = f"worker died ({exit_type.group(1)})"
    else:
        what = _WHAT.get(type(context).Reason.Name(context.reason), "actor died")
    text = detail.group(1) if detail is not None else message
    return f"Ray: {what}: {_first_sentence(text)}"


_WHAT = {
    "RAY_KILL": "killed with ray.kill",
    "OWNER_DIED": "its owner died",
    "NODE_DIED": "its node died",
    "WORKER_DIED": "worker died",
    "OUT_OF_SCOPE": "no reference to it was left",
    "REF_DELETED": "no reference to it was left",
}


def _actors_by_pid() -> dict[tuple[str, int], str]:
    """(node IP, pid) -> actor id, for processes that died before their probe learned its id."""
    try:
        from ray._private import state

        actors = state.actors()
    except Exception:
        return {}
    return {
        (str(info.get("Address", {}).get("IPAddress", "")), int(info.get("Pid") or 0)): actor_id
        for actor_id, info in actors.items()
    }


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    for end in (". ", "\n"):
        if end in text:
            return text.split(end, 1)[0] + "."
    return text


@ray.remote(num_cpus=0, max_retries=0)
def _node_forensics(pids: list[int]) -> dict[int, NodeForensics]:
    """On one node, for each of its dead processes: one task per node, not per process (each
    task a command runs may start a Ray worker process there)."""
    from ray._private.worker import _global_node

    logs_dir = _global_node.get_logs_dir_path() if _global_node is not None else ""
    kernel_log = _kernel_log()
    out = {}
    for pid in pids:
        lines: list[str] = []
        for path in sorted(glob.glob(os.path.join(logs_dir, f"worker-*-{pid}.*"))):
            if path.endswith((".out", ".err")):
                lines.extend(_tail(path, LOG_LINES))
        killed = None if kernel_log is None else f"Killed process {pid} " in kernel_log
        out[pid] = NodeForensics(tuple(lines[-LOG_LINES:]), killed)
    return out


def _forensics_on_node(node_id: str, pids: list[int]) -> ray.ObjectRef:
    strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
    return _node_forensics.options(scheduling_strategy=strategy).remote(pids)


def _tail(path: str, count: int) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return [line for line in lines if not line.startswith(_RAY_MARKERS)][-count:]


def _kernel_log() -> str | None:
    """The kernel's log (`dmesg`), or None when it cannot be read (no permission, no dmesg)."""
    try:
        proc = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=3)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None
