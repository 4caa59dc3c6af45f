"""Hangs, desyncs and dead ranks: the collective recorder, its evidence, and the watchdog."""

from rankscope.hang import evidence as _evidence  # noqa: F401  (probe commands and summaries)
from rankscope.hang.model import CallState, CollectiveRecord, RecorderSnapshot
from rankscope.hang.recorder import (
    collective_recorder,
    record_collectives,
    record_when_imported,
)
from rankscope.hang.watchdog import Watchdog
from rankscope.runtime.probe import Probe, register_startup

__all__ = [
    "CallState",
    "CollectiveRecord",
    "RecorderSnapshot",
    "Watchdog",
    "collective_recorder",
    "record_collectives",
]


@register_startup
def _start_recording_and_watching(probe: Probe) -> None:
    """At the light level and above: record collectives and watch for hangs."""
    if probe.config.level == "off":
        return
    record_when_imported()
    Watchdog(probe).start()
