"""Training health monitors: stragglers, throughput drift, loss, non-finite values, memory and
collective latency, from what `rankscope.step(loss=..., tokens=..., grad_norm=...)` records on
every rank. Importing this package registers the worker side (the step series, the `monitor`
probe command and heartbeat summary).

Modules: `worker` (the worker side: the step series, its probe command and summary),
`worker_nan` (`watch_nan`'s hooks), `worker_tap` (the straggler's phases), `worker_alerts`
(findings raised as alerts), `worker_prometheus` (the exporter, started from a worker),
`io_history` (the run directory's step series, written by the worker, read by the report),
`model`, `straggler` (the shared straggler score), `collectives` (alignment across ranks),
`analysis` (the detectors), `alert_rules` (findings as alerts, pure), `api` (`StepMonitor`,
`watch_nan`), `view` (the rows of `top`), `collect`, `collect_commbench`, `render`, `cli`.
"""

from rankscope.monitor import worker as _worker  # noqa: F401  (registers the worker side)
from rankscope.monitor import worker_prometheus as _worker_prometheus  # noqa: F401  (starts it when asked)
from rankscope.monitor.api import NanWatch, StepMonitor, watch_nan
from rankscope.monitor.model import Finding, FindingKind, Thresholds
from rankscope.monitor.straggler import StragglerScore, straggler_scores

__all__ = [
    "Finding",
    "FindingKind",
    "NanWatch",
    "StepMonitor",
    "StragglerScore",
    "Thresholds",
    "straggler_scores",
    "watch_nan",
]
