"""`rankscope logs --follow`: every second, print the lines written since the last read.

Each node's task reads on from where the previous read stopped in each file (see
`logs.collect_reader`): a follow costs what was written since, not the size of the files, and no
line is printed twice, also when Ray's .out files grow past the tail a plain read shows or a
rankscope file rotates.
"""

from __future__ import annotations

import dataclasses
import json
import time

from rankscope.cli.common import err, out
from rankscope.logs.analysis import LogFilter
from rankscope.logs.collect import read_new_lines
from rankscope.logs.render import line_text
from rankscope.runtime.client import HubClient
from rankscope.runtime.interrupt import interrupted, until_interrupted
from rankscope.serialize import plain

__all__ = ["follow_logs"]

POLL_S = 1.0


def follow_logs(
    address: str | None, job: str | None, log_filter: LogFilter, *, as_json: bool
) -> None:
    """Print new lines (one JSON object per line with `--json`) until Ctrl-C."""
    client = HubClient.attach(address)
    offsets: dict[str, dict[str, dict[str, int]]] = {}  # job -> node -> file -> bytes read
    reported: set[str] = set()
    with until_interrupted():
        while not interrupted():
            for job_id, probes in client.jobs(job).items():
                lines, errors = read_new_lines(
                    job_id, probes, log_filter, offsets.setdefault(job_id, {})
                )
                for line in lines:
                    if as_json:
                        out.print(json.dumps(plain(line)), markup=False, highlight=False)
                    else:
                        out.print(line_text(line), markup=False, highlight=False)
                for error in sorted(set(errors) - reported):  # once each, on stderr
                    reported.add(error)
                    err.print(f"rankscope: {error}", markup=False, highlight=False)
            time.sleep(POLL_S)
            log_filter = dataclasses.replace(log_filter, now=time.time())
