"""The worker side: a logging handler that writes each record at once to this process's JSON
Lines file, and `capture_logging()` to attach it to any logger.

Each record is one `os.write` of one line to a file opened for appending without a buffer, so a
SIGKILL right after the call loses nothing already logged. Files rotate by size
(RANKSCOPE_LOG_MAX_BYTES, 64 MiB, two old files kept). The record's template and numbers are
worked out later, on the probe thread (`logs.worker_summary`): the training thread pays for one JSON
line and one write. No error of the handler ever reaches the caller; failures are counted.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from json.encoder import encode_basestring_ascii

from rankscope.context import get_context
from rankscope.files import FILE_MODE, private_dirs
from rankscope.logs import worker_summary
from rankscope.logs.io_paths import ROTATE_KEEP, job_log_dir, rotated
from rankscope.runtime.probe import progress, register_startup

__all__ = ["AUTO_CAPTURE_LEVEL", "RankFileHandler", "capture_logging", "rank_handler"]

DEFAULT_MAX_BYTES = 64 << 20
_IDENTITY_TTL_S = 1.0
_STANDARD = frozenset(
    logging.LogRecord("", 0, "", 0, "", (), None).__dict__.keys()
    | {"message", "asctime", "taskName"}
)


_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str)
"""Built once: `json.dumps` with options builds a new encoder on every call."""
_quote = encode_basestring_ascii


def _max_bytes() -> int:
    raw = os.environ.get("RANKSCOPE_LOG_MAX_BYTES", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else DEFAULT_MAX_BYTES


class RankFileHandler(logging.Handler):
    """Appends every record as one JSON line to `<log dir>/<job>/<pid>.jsonl` on this node."""

    def __init__(self, *, max_bytes: int | None = None) -> None:
        super().__init__(logging.NOTSET)
        self.max_bytes = max_bytes or _max_bytes()
        self.failures = 0
        """Records the handler could not write (disk full, permissions); never raised."""
        self.path: str | None = None
        self._fd: int | None = None
        self._pid = -1
        self._size = 0
        self._ident_json = ""
        self._ident_at = 0.0

    last_written: logging.LogRecord | None = None
    """The last record any rank handler wrote: they all write this process's one file, so a
    record met twice (a handler on a logger and on its parent, or the root's error capture)
    is written once."""

    def emit(self, record: logging.LogRecord) -> None:
        if record is RankFileHandler.last_written:
            return
        RankFileHandler.last_written = record
        try:
            message = record.getMessage()
            line = self._line(record, message)
            self._write(line.encode("utf-8", "replace"))
            worker_summary.note(
                record.levelname, message, record.created, record.pathname, record.lineno
            )
        except Exception:
            self.failures += 1

    def _line(self, record: logging.LogRecord, message: str) -> str:
        """One JSON object, put together by hand: the identity part is encoded once a second,
        strings through the json module's C escaper (`json.dumps` per record costs 1.4x)."""
        now = record.created
        if now - self._ident_at > _IDENTITY_TTL_S or os.getpid() != self._pid:
            self._refresh_identity(now)
        parts = [
            '{"time":',
            repr(now),
            ',"level":',
            _quote(record.levelname),
            ',"logger":',
            _quote(record.name),
            ',"message":',
            _quote(message),
            ',"step":',
            str(progress.step),
            self._ident_json,
        ]
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            parts += [',"exc":', _quote(record.exc_text)]
        names = record.__dict__.keys() - _STANDARD
        if names:  # `_`-names are frameworks' own (Ray adds `_ray_timestamp_ns`)
            extra = {k: record.__dict__[k] for k in names if k[:1] != "_"}
            if extra:
                parts += [',"extra":', _ENCODER.encode(extra)]
        parts.append("}\n")
        return "".join(parts)

    def _refresh_identity(self, now: float) -> None:
        ctx = get_context()
        ident = {
            "rank": ctx.rank,
            "group": ctx.group,
            "role": ctx.actor_class,
            "node": ctx.hostname,
            "pid": ctx.pid,
        }
        self._ident_json = "," + _ENCODER.encode(ident)[1:-1]
        self._ident_at = now
        if self._pid != ctx.pid or self.path is None:
            self._open(os.path.join(job_log_dir(ctx.job_id), f"{ctx.pid}.jsonl"), ctx.pid)

    def _open(self, path: str, pid: int) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        private_dirs(os.path.dirname(path))
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        self._size = os.fstat(self._fd).st_size
        self.path, self._pid = path, pid

    def _write(self, data: bytes) -> None:
        if self._fd is None or self.path is None:
            raise OSError("no log file")
        if self._size + len(data) > self.max_bytes and self._size > 0:
            self._rotate()
        os.write(self._fd, data)
        self._size += len(data)

    def _rotate(self) -> None:
        assert self.path is not None and self._fd is not None
        os.close(self._fd)
        self._fd = None
        for n in range(ROTATE_KEEP, 1, -1):
            if os.path.exists(rotated(self.path, n - 1)):
                os.replace(rotated(self.path, n - 1), rotated(self.path, n))
        os.replace(self.path, rotated(self.path, 1))
        self._open(self.path, self._pid)

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None
        super().close()


_handler: RankFileHandler | None = None
_handler_lock = threading.Lock()


def rank_handler() -> RankFileHandler:
    """This process's one handler (created on first use)."""
    global _handler
    with _handler_lock:
        if _handler is None:
            _handler = RankFileHandler()
        return _handler


def capture_logging(names: list[str] | tuple[str, ...] | None = None) -> RankFileHandler:
    """Attach rankscope's per-rank file handler to these loggers (the root logger: all).

    Example: `rankscope.capture_logging(["verl", "ray.train"])`. The loggers' levels stay
    yours; a logger captured twice (itself and a parent) is written once.
    """
    handler = rank_handler()
    for name in names if names is not None else [""]:
        logger = logging.getLogger(name)
        if handler not in logger.handlers:
            logger.addHandler(handler)
    return handler


AUTO_CAPTURE_LEVEL = logging.ERROR
"""With no code change, records of this level and above that reach the root logger go to the
rank's file too, so an error burst is found though nobody called `capture_logging`. A record
below it costs the training thread two comparisons."""


class _RootErrors(logging.Handler):
    """On the root logger from the probe's start: ERROR records into the rank's file. Where it
    is the only handler a record meets, the record is also printed as Python prints it with
    no handler at all (`logging.lastResort`), so the worker's stderr keeps what it had."""

    def handle(self, record: logging.LogRecord) -> bool:  # no lock: two comparisons mostly
        if record.levelno >= AUTO_CAPTURE_LEVEL:
            rank_handler().emit(record)
        last = logging.lastResort
        if last is not None and record.levelno >= last.level and self._alone(record.name):
            last.handle(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        self.handle(record)

    def _alone(self, name: str) -> bool:
        logger: logging.Logger | None = logging.getLogger(name)
        while logger is not None:
            if any(h is not self for h in logger.handlers):
                return False
            logger = logger.parent if logger.propagate else None
        return True


@register_startup
def _capture_errors(probe: object) -> None:
    root = logging.getLogger()
    if not any(isinstance(h, _RootErrors) for h in root.handlers):
        root.addHandler(_RootErrors())
