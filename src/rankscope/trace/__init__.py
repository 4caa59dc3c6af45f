"""Tracing and timelines: spans, `debug_decorator`, `enable_detailed_tracing`, `rankscope trace`.

Importing it registers the worker side: the probe's `trace` command, the step markers, and the
clock offset every heartbeat carries.
"""

from rankscope.trace import worker as _worker  # noqa: F401  (the probe's `trace` command)
from rankscope.trace.api import debug_decorator, enable_detailed_tracing, span
from rankscope.trace.model import RankSummary, TraceSummary

__all__ = ["RankSummary", "TraceSummary", "debug_decorator", "enable_detailed_tracing", "span"]
