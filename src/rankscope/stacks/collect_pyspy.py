"""Fallback for processes whose probe cannot answer: py-spy, run on the process's own node.

py-spy reads the target's memory from outside, so it works when the probe thread cannot get
the GIL (a C extension holding it, a stopped process). Ray[default] installs py-spy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rankscope.runtime.probe import OWN_THREAD_PREFIX
from rankscope.stacks.model import Frame, ThreadStack
from rankscope.stacks.worker import is_library

PYSPY_TIMEOUT_S = 10.0


def pyspy_executable() -> str | None:
    """py-spy beside this interpreter (a venv's bin/), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return beside if os.access(beside, os.X_OK) else shutil.which("py-spy")


def dump_local(pid: int, timeout: float = PYSPY_TIMEOUT_S) -> tuple[ThreadStack, ...]:
    """py-spy's view of a process on this node; raises RuntimeError with py-spy's reason."""
    exe = pyspy_executable()
    if exe is None:
        raise RuntimeError("py-spy is not installed on this node (pip install py-spy)")
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [exe, "dump", "--pid", str(pid), "--json"],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            # a stopped process (SIGSTOP, a debugger) cannot be suspended to be read: read it
            # as it stands instead, which is consistent since it does not run
            left = max(1.0, timeout - (time.monotonic() - start))
            retry = subprocess.run(
                [exe, "dump", "--pid", str(pid), "--json", "--nonblocking"],
                capture_output=True,
                text=True,
                timeout=left,
            )
            proc = retry if retry.returncode == 0 else proc
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"py-spy dump --pid {pid} took over {timeout:.0f}s") from None
    if proc.returncode != 0:
        reason = (proc.stderr.strip().splitlines() or ["no output"])[0]
        raise RuntimeError(f"py-spy dump --pid {pid} failed: {reason}")
    return parse_pyspy_json(json.loads(proc.stdout), pid)


def parse_pyspy_json(threads: list[dict[str, Any]], pid: int) -> tuple[ThreadStack, ...]:
    stacks = []
    for thread in threads:
        if (thread.get("thread_name") or "").startswith(OWN_THREAD_PREFIX):
            continue
        frames = tuple(
            Frame(f["name"], f["filename"], int(f["line"]), is_library(f["filename"]))
            for f in thread.get("frames", [])
        )
        stacks.append(
            ThreadStack(
                thread_name=thread.get("thread_name") or f"thread-{thread['thread_id']}",
                thread_id=int(thread["thread_id"]),
                is_main=thread.get("os_thread_id") == pid,
                frames=frames,
            )
        )
    stacks.sort(key=lambda s: (not s.is_main, s.thread_name))
    return tuple(stacks)


PARALLEL_DUMPS = 8
"""py-spy processes one node's task runs at once (each briefly stops its target)."""


def dump_many_local(pids: list[int]) -> dict[int, tuple[ThreadStack, ...] | str]:
    """py-spy's view of each of `pids` on this node, or why it could not be taken; each pid
    dumped once however often it is asked."""
    from concurrent.futures import ThreadPoolExecutor

    def one(pid: int) -> tuple[ThreadStack, ...] | str:
        try:
            return dump_local(pid)
        except Exception as exc:  # py-spy's reason, or what broke reading its output
            return str(exc) or type(exc).__name__

    unique = list(dict.fromkeys(pids))
    with ThreadPoolExecutor(max_workers=min(PARALLEL_DUMPS, len(unique) or 1)) as pool:
        return dict(zip(unique, pool.map(one, unique), strict=True))


@ray.remote(num_cpus=0, max_retries=0)
def _dump_on_node(pids: list[int]) -> dict[int, tuple[ThreadStack, ...] | str]:
    return dump_many_local(pids)


def dump_on_node(node_id: str, pids: list[int]) -> ray.ObjectRef:
    """Start py-spy for `pids` by one Ray task pinned to `node_id` (one worker start per node,
    not per process: at thousands of ranks the starts, not py-spy, were the cost); the task
    returns each pid's threads, or the reason py-spy gave."""
    strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
    return _dump_on_node.options(scheduling_strategy=strategy).remote(pids)
