"""`rankscope logs --follow`: read again every second, print the lines not printed yet."""

from __future__ import annotations

import dataclasses
import json
import time

from rankscope.cli.common import out
from rankscope.logs.analysis import LogFilter
from rankscope.logs.collect import read_job_logs
from rankscope.logs.model import LogLine
from rankscope.logs.render import line_text
from rankscope.runtime.client import HubClient
from rankscope.serialize import plain

__all__ = ["follow_logs", "line_key"]

POLL_S = 1.0
SEEN_MAX = 1_000_000


def line_key(line: LogLine) -> tuple[object, ...]:
    """What makes a line the same one on the next read (Ray's .out/.err lines carry no time)."""
    if line.source == "log":
        return (line.pid, line.time, line.seq)
    return (line.pid, line.source, line.seq, line.message)


def follow_logs(
    address: str | None, job: str | None, log_filter: LogFilter, *, as_json: bool
) -> None:
    """Print new lines (one JSON object per line with `--json`) until Ctrl-C."""
    client = HubClient.attach(address)
    seen: set[tuple[object, ...]] = set()
    try:
        while True:
            for job_id, probes in client.jobs(job).items():
                result = read_job_logs(job_id, probes, log_filter, raw=True)
                for line in result.lines:
                    key = line_key(line)
                    if key in seen:
                        continue
                    seen.add(key)
                    if as_json:
                        out.print(json.dumps(plain(line)), markup=False, highlight=False)
                    else:
                        out.print(line_text(line), markup=False, highlight=False)
            if len(seen) > SEEN_MAX:
                seen.clear()
            time.sleep(POLL_S)
            log_filter = dataclasses.replace(log_filter, now=time.time())
    except KeyboardInterrupt:
        return
