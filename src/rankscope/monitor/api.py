"""The monitor's public Python API: `StepMonitor` (this rank's verdicts in-process, from the series
`rankscope.step()` keeps) and `watch_nan` (the first module whose output or gradient is NaN/Inf;
its hooks live in `worker_nan.py`)."""

from __future__ import annotations

from typing import Any

from rankscope.monitor import analysis
from rankscope.monitor.model import Finding, RankSeries, Thresholds
from rankscope.monitor.worker import memory_use, step_recorder
from rankscope.monitor.worker_nan import NanWatch, watch_nan

__all__ = ["NanWatch", "StepMonitor", "watch_nan"]


class StepMonitor:
    """This rank's own findings: throughput drift, loss, first non-finite, memory.

    Example: `monitor = rankscope.StepMonitor(thresholds={"loss_z": 8})`, then after
    `rankscope.step(loss=...)`, `for f in monitor.check(): log.warning(f.evidence)`.
    Cross-rank findings (stragglers, collective latency) need every rank: `rankscope monitor`.
    """

    def __init__(self, thresholds: Thresholds | dict[str, Any] | None = None) -> None:
        if isinstance(thresholds, dict):
            thresholds = Thresholds(**thresholds)
        self.thresholds = thresholds or Thresholds()

    def check(self) -> list[Finding]:
        """The active findings over the recorded window (milliseconds for 1,000 steps)."""
        from rankscope.context import get_context

        rec = step_recorder()
        rank = get_context().rank
        rank = -1 if rank is None else rank
        series = RankSeries(rank, "", "", "", rec.samples(), rec.first_nonfinite, memory_use(), ())
        return analysis.analyze([series], self.thresholds)
