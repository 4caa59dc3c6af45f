"""Why a registered process died: Ray's death cause, its last log lines, the OOM killers.

Best effort and bounded in time: each source that cannot answer (node gone, no permission to
read the kernel log) is skipped and the others still speak.
"""

from __future__ import annotations

import glob
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rankscope.runtime.protocol import ProbeStatus

LOG_LINES = 5
NODE_TASK_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class NodeForensics:
    """What the dead process's node still has: its log tail, and the kernel's OOM verdict."""

    last_lines: tuple[str, ...]
    kernel_oom: bool | None
    """True/False when the kernel log could be read, None when it could not."""


def explain_deaths(dead: Sequence[ProbeStatus]) -> dict[str, str]:
    """probe_id -> one line on why that process died."""
    refs = {p.info.probe_id: _forensics_on_node(p.context.node_id, p.context.pid) for p in dead}
    ready, _ = (
        ray.wait(list(refs.values()), num_returns=len(refs), timeout=NODE_TASK_TIMEOUT_S)
        if refs
        else ([], [])
    )
    out = {}
    for p in dead:
        parts = [ray_death_cause(p.context.actor_id)] if p.context.actor_id else []
        ref = refs[p.info.probe_id]
        forensics = None
        if ref in ready:
            try:
                forensics = ray.get(ref)
            except Exception:
                forensics = None
        if forensics is not None:
            if forensics.kernel_oom:
                parts.append("the kernel's OOM killer took it (dmesg)")
            if forensics.last_lines:
                parts.append("last log lines: " + " | ".join(forensics.last_lines))
        else:
            parts.append("its node did not answer (node down?)")
        out[p.info.probe_id] = "; ".join(x for x in parts if x)
    return out


def ray_death_cause(actor_id: str) -> str:
    """Ray's own account (GCS actor table): exit type, and whether its memory monitor killed it."""
    try:
        from ray._private import state

        info = state.actors(actor_id)
        cause = info.get("DeathCause")
    except Exception:
        return ""
    if cause is None:
        return ""
    if cause.HasField("oom_context"):
        return "Ray's memory monitor killed it (node out of memory): " + _first_sentence(
            cause.oom_context.error_message
        )
    if cause.HasField("actor_died_error_context"):
        context = cause.actor_died_error_context
        message = context.error_message
        exit_detail = message.split("Worker exit detail:", 1)[-1].strip()
        kind = (
            message.split("Worker exit type:", 1)[-1].split()[0] if "exit type" in message else ""
        )
        return f"Ray: worker died ({kind or 'unknown exit'}): {_first_sentence(exit_detail)}"
    return _first_sentence(str(cause))


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    for end in (". ", "\n"):
        if end in text:
            return text.split(end, 1)[0] + "."
    return text


@ray.remote(num_cpus=0, max_retries=0)
def _node_forensics(pid: int) -> NodeForensics:
    from ray._private.worker import _global_node

    logs_dir = _global_node.get_logs_dir_path() if _global_node is not None else ""
    lines: list[str] = []
    for path in sorted(glob.glob(os.path.join(logs_dir, f"worker-*-{pid}.*"))):
        if path.endswith((".out", ".err")):
            lines.extend(_tail(path, LOG_LINES))
    return NodeForensics(tuple(lines[-LOG_LINES:]), _kernel_killed(pid))


def _forensics_on_node(node_id: str, pid: int) -> ray.ObjectRef:
    strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
    return _node_forensics.options(scheduling_strategy=strategy).remote(pid)


def _tail(path: str, count: int) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return [line for line in lines if not line.startswith(":job_id:")][-count:]


def _kernel_killed(pid: int) -> bool | None:
    try:
        proc = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=3)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return f"Killed process {pid} " in proc.stdout
