"""The job directory's traces and step series, read where the files are.

Both are read whole (a trace up to 64 MiB, the step files up to 64 MiB) and only their digest
travels: on this machine when the run directory is here, else in a Ray task pinned to the hub's
node (the head node, `runtime.hub.hub_options`), so `rankscope report --job ID` from a laptop
summarises the trace and charts the loss as it would on the hub's machine.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from typing import Any

from rankscope.runtime.run_dir import TRACE_PREFIX
from rankscope.serialize import parse_json

__all__ = ["JobFiles", "read_job_files", "read_on_hub_node", "read_traces"]

TRACES_TRIED = 3
"""The newest trace files tried, newest first, until one reads; only that one is summarised
(read whole: ~2.5 s for a 28 MiB trace of 512 ranks at load 3)."""
TRACE_BYTES = 64 << 20
"""Larger trace files are listed, not read (Perfetto opens them)."""
HUB_NODE_TIMEOUT_S = 120.0
"""The task on the hub's node: a worker to start, then a 64 MiB trace to read (seconds)."""


@dataclass(frozen=True)
class JobFiles:
    """What the report takes from the job directory's big files (plain values)."""

    traces: tuple[dict[str, Any], ...] = ()
    series: tuple[dict[str, Any], ...] = ()
    health: tuple[dict[str, Any], ...] = ()
    series_from: str = ""
    notes: tuple[str, ...] = ()


def read_job_files(job_dir: str, files: list[tuple[str, int]], *, series: bool) -> JobFiles:
    """The traces' digests and (when `series`) the ranks' whole-run step series."""
    from rankscope.report.collect_steps import read_step_files, series_from_docs, step_files

    traces = read_traces(job_dir, files)
    if not series or not step_files(files):
        return JobFiles(traces)
    docs, notes = read_step_files(job_dir, files)
    if not docs:
        return JobFiles(traces, notes=tuple(notes))
    rows, health, stride = series_from_docs(docs)
    every = "every step" if stride == 1 else f"one point per {stride} steps"
    where = f"the run directory's step files, the whole run ({every})"
    return JobFiles(traces, rows, health, where, tuple(notes))


def read_on_hub_node(job_dir: str, files: list[tuple[str, int]], *, series: bool) -> JobFiles:
    """`read_job_files` in a task on the hub's node (the CLI runs on another machine)."""
    import ray

    from rankscope.config import Config
    from rankscope.runtime.hub import hub_options

    remote: Any = ray.remote(num_cpus=0, max_retries=0)
    task = remote(read_job_files).options(resources=hub_options(Config.from_env())["resources"])
    result: JobFiles = ray.get(
        task.remote(job_dir, files, series=series), timeout=HUB_NODE_TIMEOUT_S
    )
    return result


def read_traces(job_dir: str, files: list[tuple[str, int]]) -> tuple[dict[str, Any], ...]:
    """The job's trace files (oldest first); the newest that reads (of the last `TRACES_TRIED`)
    digested, the others say why they were not."""
    from rankscope.report.traces import digest

    traces = [(n, size) for n, size in files if is_trace(n)]
    out: list[dict[str, Any]] = []
    done = False
    for i, (name, size) in reversed(list(enumerate(traces))):
        path = os.path.join(job_dir, name)
        entry: dict[str, Any] = {"name": name, "path": path, "bytes": size}
        if done or i < len(traces) - TRACES_TRIED:
            entry["error"] = "older trace, not summarised (open it in Perfetto)"
        elif size > TRACE_BYTES:
            entry["error"] = (
                f"{size / 2**20:.0f} MiB, over the {TRACE_BYTES >> 20} MiB the report reads: "
                "open it in Perfetto"
            )
        else:
            try:
                opener: Any = gzip.open if name.endswith(".gz") else open
                with opener(path, "rb") as f:
                    entry["digest"] = digest(parse_json(f.read()))
                done = True
            except Exception as exc:  # a broken file costs its summary, never the page
                entry["error"] = f"not readable as a trace ({type(exc).__name__}: {exc})"[:200]
        out.append(entry)
    return tuple(reversed(out))


def is_trace(name: str) -> bool:
    return name.startswith(TRACE_PREFIX) and name.endswith((".json", ".json.gz"))
