"""The run directory: private files (0600/0700), and a full disk costs events, never the hub
(issue 20). No Ray: the hub's EventSink on an asyncio loop.

A full file system without mounting one: events.jsonl is made a link to /dev/full, on which
every write fails with the kernel's own ENOSPC (No space left on device).
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import time

import pytest

from rankscope.runtime.protocol import Event
from rankscope.runtime.run_dir import EventSink, append_events, tail_events, write_atomically

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_files_are_private(tmp_path):
    old = os.umask(0o022)  # the usual umask would leave them world-readable
    try:
        run_dir = str(tmp_path / "runs")
        append_events(run_dir, [("job1", "p1", Event("x", time.time(), {"a": 1}))])
        report = write_atomically(run_dir, "job1", "hang-report.json", "{}")
    finally:
        os.umask(old)
    assert _mode(run_dir) == 0o700
    assert _mode(os.path.join(run_dir, "job1")) == 0o700
    assert _mode(os.path.join(run_dir, "job1", "events.jsonl")) == 0o600
    assert _mode(report) == 0o600
    assert sorted(os.listdir(os.path.join(run_dir, "job1"))) == ["events.jsonl", "hang-report.json"]


def _full_disk(run_dir: str, job: str) -> None:
    os.makedirs(os.path.join(run_dir, job), mode=0o700)
    os.symlink("/dev/full", os.path.join(run_dir, job, "events.jsonl"))


def test_full_disk_drops_and_counts_events_and_warns_once(tmp_path, caplog):
    run_dir = str(tmp_path / "runs")
    _full_disk(run_dir, "job1")
    sink = EventSink(run_dir, queue_size=1000)

    async def scenario() -> asyncio.Task[None]:
        writer = asyncio.ensure_future(sink.write_forever())
        for batch in range(5):  # five heartbeats' worth, each written (and refused) on its own
            for i in range(10):
                sink.offer("job1", "p1", Event("x", time.time(), {"batch": batch, "i": i}))
            await asyncio.sleep(0.05)
        for _ in range(100):
            if sink.dropped >= 50:
                break
            await asyncio.sleep(0.02)
        return writer

    with caplog.at_level(logging.WARNING, logger="rankscope"):
        loop = asyncio.new_event_loop()
        try:
            writer = loop.run_until_complete(scenario())
            assert not writer.done()  # the writer lives on: the next event may fit
            writer.cancel()
        finally:
            loop.close()
    assert sink.dropped == 50
    assert "No space left on device" in sink.write_error
    warnings = [r for r in caplog.records if "cannot write events" in r.getMessage()]
    assert len(warnings) == 1
    assert "No space left on device" in warnings[0].getMessage()


def test_reading_events_from_a_device_returns_nothing(tmp_path):
    """/dev/full reads as endless zeros: a reader must not hang on it."""
    run_dir = str(tmp_path / "runs")
    _full_disk(run_dir, "job1")
    assert tail_events(run_dir, "job1", None, 10) == []
    assert tail_events(run_dir, "no-such-job", None, 10) == []


def test_reading_events_skips_lines_the_hub_did_not_write(tmp_path):
    run_dir = str(tmp_path / "runs")
    append_events(run_dir, [("job1", "p1", Event("good", 1.0, {"a": 1}))])
    with open(os.path.join(run_dir, "job1", "events.jsonl"), "ab") as f:
        f.write(b'\xff\xfe\n[1]\nnull\n{"kind": 5, "time": 1}\n{"kind": "x", "time": "zz"}\n')
        f.write(b'{"kind": "x", "time": 2, "payload": "str"}\n{"kind": "x", "time": true}\n{"ki\n')
    append_events(run_dir, [("job1", "p1", Event("good", 3.0, {"b": 2}))])
    events = tail_events(run_dir, "job1", None, 10)
    assert [(e["kind"], e["time"]) for e in events] == [("good", 1.0), ("good", 3.0)]
