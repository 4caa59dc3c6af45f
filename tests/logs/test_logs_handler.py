"""The per-rank JSON Lines handler and `DistributedLogger`, in this process and in a child
killed with SIGKILL right after it logged (no Ray needed: the file is the point)."""

from __future__ import annotations

import io
import json
import logging
import os
import pickle
import signal
import subprocess
import sys
import textwrap

import pytest

from rankscope import level
from rankscope.logs import DistributedLogger, RankFileHandler
from rankscope.logs import worker_summary as log_summary


@pytest.fixture
def log_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RANKSCOPE_LOG_DIR", str(tmp_path))
    return tmp_path


def _records(handler: RankFileHandler) -> list[dict]:
    assert handler.path is not None
    with open(handler.path) as f:
        return [json.loads(line) for line in f]


def test_records_are_json_lines_with_identity_step_and_extra(log_dir):
    handler = RankFileHandler()
    logger = logging.getLogger("rs-test-fields")
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        logger.info("loss=%.3f", 0.3141, extra={"epoch": 2})
        try:
            raise KeyError("batch")
        except KeyError:
            logger.exception("step failed")
        logger.debug("not written")
    finally:
        logger.removeHandler(handler)
        handler.close()
    first, second = _records(handler)
    assert first["message"] == "loss=0.314" and first["level"] == "INFO"
    assert first["extra"] == {"epoch": 2} and first["pid"] == os.getpid()
    assert {"rank", "group", "role", "node", "step", "time", "logger"} <= set(first)
    assert second["level"] == "ERROR" and "KeyError: 'batch'" in second["exc"]
    assert str(handler.path).startswith(str(log_dir))


def test_log_files_are_private(log_dir):
    old = os.umask(0o022)  # the usual umask would leave them world-readable
    handler = RankFileHandler()
    try:
        handler.emit(
            logging.LogRecord("rs-test-private", logging.INFO, __file__, 1, "hi", (), None)
        )
    finally:
        os.umask(old)
        handler.close()
    assert handler.path is not None
    assert os.stat(handler.path).st_mode & 0o777 == 0o600
    assert os.stat(os.path.dirname(handler.path)).st_mode & 0o777 == 0o700  # the job's folder


def test_files_rotate_by_size_with_a_bound(log_dir):
    handler = RankFileHandler(max_bytes=4000)
    logger = logging.getLogger("rs-test-rotate")
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        for i in range(300):
            logger.info("record %d of a rotating file", i)
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert handler.path is not None
    names = sorted(os.listdir(os.path.dirname(handler.path)))
    base = os.path.basename(handler.path)
    assert names == [base, base + ".1", base + ".2"]
    assert all(
        os.path.getsize(os.path.join(os.path.dirname(handler.path), n)) <= 4000 for n in names
    )
    assert _records(handler)[-1]["message"] == "record 299 of a rotating file"


def test_distributed_logger_is_a_stdlib_logger_and_full_level_lets_debug_through(log_dir):
    log = DistributedLogger("rs-test-dl", aggregation_interval=5, alert_threshold=0.8)
    stream = io.StringIO()
    other = logging.StreamHandler(stream)
    other.setFormatter(logging.Formatter("%(filename)s %(levelname)s %(message)s"))
    log.logger.addHandler(other)
    try:
        log.info("hello %s", "world")
        log.debug("hidden at light")
        level.set_level("full")
        log.debug("shown at full %d", 7)
    finally:
        level.set_level("light")
        log.logger.removeHandler(other)
    assert stream.getvalue().splitlines() == [
        "test_logs_handler.py INFO hello world",
        "test_logs_handler.py DEBUG shown at full 7",
    ]
    assert isinstance(log, logging.LoggerAdapter) and log.logger.name == "rs-test-dl"
    assert log_summary.settings().alert_threshold == 0.8
    with pytest.raises(ValueError, match="alert_threshold"):
        DistributedLogger("rs-test-dl", alert_threshold=1.5)


def test_summary_keeps_each_templates_numbers(log_dir):
    for value in (0.52, 0.31, 0.4):
        log_summary.note("INFO", f"sum-test loss={value}", 1.0)
    log_summary.drain()
    (stat,) = [t for t in log_summary.templates() if t.template == "sum-test loss=<n>"]
    assert (stat.count, stat.low, stat.high, stat.last) == (3, (0.31,), (0.52,), (0.4,))


def test_a_line_logged_right_before_sigkill_is_on_disk(tmp_path):
    script = textwrap.dedent(
        """
        import os, signal, rankscope
        log = rankscope.DistributedLogger("dying")
        for i in range(3):
            log.info("working %d", i)
        log.warning("about to die")
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    env = {**os.environ, "RANKSCOPE_LOG_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", script], env=env, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    (job_dir,) = os.listdir(tmp_path)
    (name,) = os.listdir(tmp_path / job_dir)
    with open(tmp_path / job_dir / name) as f:
        last = json.loads(f.read().splitlines()[-1])
    assert (last["level"], last["message"]) == ("WARNING", "about to die")


def test_the_logs_summary_keeps_errors_first_within_its_share_of_the_heartbeat():
    from rankscope.logs.model import TemplateStat

    def stat(i: int, level: str, count: int) -> TemplateStat:
        text = f"worker <n> of shard {chr(97 + i % 26) * 40} {i} finished: loss=<n> lr=<n>"
        return TemplateStat(
            level, text, count, 1.0e9, 1.0e9 + 5, (0.0, 1.5, 1e-4), (9.0, 2.5, 3e-4)
        )

    stats = [stat(i, "INFO", 1000 - i) for i in range(100)] + [stat(100, "ERROR", 1)]
    summary = log_summary.within_share({"time": 1.0, "counts": {}, "unsummarized": 0}, stats)
    assert len(pickle.dumps(summary, protocol=pickle.HIGHEST_PROTOCOL)) <= 2048
    kept = summary["templates"]
    assert kept[0]["level"] == "ERROR"  # the one error, however rare, comes first
    assert [t["count"] for t in kept[1:]] == sorted((t["count"] for t in kept[1:]), reverse=True)
    assert 5 <= len(kept) < 100 and summary["more_templates"] == 101 - len(kept)


def test_errors_reach_the_rank_file_with_no_code_change_and_stderr_keeps_them(tmp_path):
    """What the probe's start does in every worker: a job that only uses `logging.getLogger`."""
    code = textwrap.dedent(
        """
        import logging
        from rankscope.logs.worker import _capture_errors, rank_handler
        _capture_errors(None)
        _capture_errors(None)  # a second probe start adds nothing
        log = logging.getLogger("train.data")
        log.warning("slow shard %d", 1)
        log.error("reading shard %d failed: timed out", 3)
        print(rank_handler().path)
        """
    )
    env = {**os.environ, "RANKSCOPE_LOG_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    with open(done.stdout.strip()) as f:
        [record] = [json.loads(line) for line in f]
    assert (record["level"], record["message"]) == ("ERROR", "reading shard 3 failed: timed out")
    assert done.stderr.splitlines() == ["slow shard 1", "reading shard 3 failed: timed out"]
