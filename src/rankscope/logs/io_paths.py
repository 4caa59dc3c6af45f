"""Where log files are on a node: rankscope's per-rank JSON Lines and Ray's worker .out/.err.

Each process appends to `<session dir>/logs/rankscope/<job id>/<pid>.jsonl` in the Ray session
directory of its own node (RANKSCOPE_LOG_DIR replaces `<session dir>/logs/rankscope`): beside
Ray's own worker logs, kept as long as Ray keeps the session, readable by a task on that node
after the process died, and never on a shared filesystem the job did not ask for.
"""

from __future__ import annotations

import glob
import os
import tempfile

__all__ = ["job_log_dir", "log_root", "ray_logs_dir", "rotated", "worker_std_files"]

ROTATE_KEEP = 2
"""Rotated files kept per process (`<pid>.jsonl.1`, `.2`) besides the one written to."""


def ray_logs_dir() -> str | None:
    """This node's Ray session `logs/` directory, or None outside a Ray node."""
    try:
        from ray._private import worker

        node = worker._global_node or getattr(worker.global_worker, "node", None)
        if node is not None:
            return str(node.get_logs_dir_path())
    except Exception:
        pass
    tmp = os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()
    latest = os.path.join(tmp, "ray", "session_latest", "logs")
    return os.path.realpath(latest) if os.path.isdir(latest) else None


def log_root() -> str:
    """RANKSCOPE_LOG_DIR, else `rankscope/` in this node's Ray logs dir, else a temp dir."""
    explicit = os.environ.get("RANKSCOPE_LOG_DIR")
    if explicit:
        return explicit
    logs = ray_logs_dir()
    if logs is not None:
        return os.path.join(logs, "rankscope")
    return os.path.join(tempfile.gettempdir(), "rankscope-logs")


def job_log_dir(job_id: str) -> str:
    return os.path.join(log_root(), job_id or "no-job")


def rotated(path: str, n: int) -> str:
    return f"{path}.{n}"


def worker_std_files(pid: int) -> list[tuple[str, str]]:
    """(path, `stdout`|`stderr`) of Ray's files for this worker pid on this node."""
    logs = ray_logs_dir()
    if logs is None:
        return []
    found = []
    for suffix, source in ((".out", "stdout"), (".err", "stderr")):
        found += [
            (p, source) for p in sorted(glob.glob(os.path.join(logs, f"worker-*-{pid}{suffix}")))
        ]
    return found
