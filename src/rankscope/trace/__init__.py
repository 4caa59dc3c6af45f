"""Tracing and timelines: spans, `debug_decorator`, `enable_detailed_tracing`, `rankscope trace`.

Importing it registers the worker side: the probe's `trace` command, the step markers, and the
clock offset every heartbeat carries.
"""

from rankscope.trace import handler as _handler  # noqa: F401  (the probe's `trace` command)
from rankscope.trace.api import enable_detailed_tracing
from rankscope.trace.decorator import debug_decorator
from rankscope.trace.model import RankSummary, TraceSummary
from rankscope.trace.spans import span

__all__ = ["RankSummary", "TraceSummary", "debug_decorator", "enable_detailed_tracing", "span"]
