"""What each probe reports about its collectives and whereabouts, live and as last words.

The `collectives` command returns the whole ring buffer; the heartbeat summaries carry the
last few records and the main thread's whereabouts, so the hub still knows them after the
process died.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from rankscope.hang.model import RecorderSnapshot
from rankscope.hang.recorder import collective_recorder
from rankscope.runtime.probe import register_handler, register_summary
from rankscope.stacks.capture import walk
from rankscope.stacks.model import headline

SUMMARY_RECORDS = 16


@register_handler("collectives")
def _collectives_command(args: dict[str, Any]) -> RecorderSnapshot:
    return collective_recorder().snapshot()


@register_summary("collectives")
def last_collectives() -> RecorderSnapshot:
    """The last few records: small enough to send with every heartbeat."""
    return collective_recorder().snapshot(last=SUMMARY_RECORDS)


@register_summary("where")
def main_thread_headline() -> str | None:
    """Where the main thread is, in one line (`load_batch data.py:41`)."""
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    return None if frame is None else headline(walk(frame))
