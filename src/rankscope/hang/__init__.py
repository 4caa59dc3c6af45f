"""Hangs, desyncs and dead ranks: the collective recorder, its evidence, and the watchdog."""

from rankscope.hang import hub_death_alert as _hub_death_alert  # noqa: F401  (the hub's death alert)
from rankscope.hang import worker as _worker  # noqa: F401  (probe commands and summaries)
from rankscope.hang import worker_watchdog as _worker_watchdog  # noqa: F401  (starts recording and watching)
from rankscope.hang.api import record_collectives
from rankscope.hang.model import CallState, CollectiveRecord, RecorderSnapshot

__all__ = ["CallState", "CollectiveRecord", "RecorderSnapshot", "record_collectives"]
