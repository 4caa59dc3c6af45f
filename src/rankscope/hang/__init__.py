"""Hangs, desyncs and dead ranks: the collective recorder, its evidence, and the watchdog."""

from rankscope.hang import death_alert as _death_alert  # noqa: F401  (the hub's death alert)
from rankscope.hang import evidence as _evidence  # noqa: F401  (probe commands and summaries)
from rankscope.hang import watchdog as _watchdog  # noqa: F401  (starts recording and watching)
from rankscope.hang.model import CallState, CollectiveRecord, RecorderSnapshot
from rankscope.hang.recorder import record_collectives

__all__ = ["CallState", "CollectiveRecord", "RecorderSnapshot", "record_collectives"]
