"""Training health monitors: stragglers, throughput drift, loss, non-finite values, memory and
collective latency, from what `rankscope.step(loss=..., tokens=..., grad_norm=...)` records on
every rank. Importing this package registers the worker side (the step series, the `monitor`
probe command and heartbeat summary).

Modules: `recorder` (the worker side), `prometheus` (the exporter), `model`, `straggler`
(the shared straggler score), `collectives` (alignment across ranks), `analysis` (the
detectors), `nan` (`watch_nan`), `api` (`StepMonitor`), `view` (the rows of `top`), `collect`,
`render`, `cli`.
"""

from rankscope.monitor import prometheus as _prometheus  # noqa: F401  (starts it when asked)
from rankscope.monitor import recorder as _recorder  # noqa: F401  (registers the worker side)
from rankscope.monitor.api import StepMonitor
from rankscope.monitor.model import Finding, FindingKind, Thresholds
from rankscope.monitor.nan import NanWatch, watch_nan
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
