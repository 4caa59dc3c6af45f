"""`oom_guard`: on an out-of-memory error, say why, write it down, and re-raise.

The verdict goes to three places: a JSON file (the run directory when RANKSCOPE_RUN_DIR is set,
else a temp directory), the hub's events (`memory.oom`, when a probe runs in this process) and a
note on the exception itself, so it shows in the traceback the user already reads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import tempfile
import time
import traceback
from types import TracebackType
from typing import Any, Literal

from rankscope.files import private_dirs, write_text_atomically
from rankscope.memory import analysis, worker_gpus
from rankscope.memory import worker_snapshot as snap

log = logging.getLogger("rankscope")

OOM_ERRORS = ("OutOfMemoryError", "MemoryError")
"""Exception class names (anywhere in the MRO) that trigger the guard; torch's
`torch.OutOfMemoryError` (alias `torch.cuda.OutOfMemoryError`) and Python's MemoryError."""


def is_oom(exc: BaseException) -> bool:
    return any(cls.__name__ in OOM_ERRORS for cls in type(exc).__mro__)


class oom_guard(contextlib.ContextDecorator):
    """Context manager and decorator: explain out-of-memory errors, then re-raise them.

    Example:
        with rankscope.oom_guard():
            loss = model(batch).sum(); loss.backward()

        @rankscope.oom_guard(path="/tmp/ooms")
        def train_step(batch): ...

    `path` is a directory (a file name is made up) or a `.json` file. `last_report` holds the
    latest verdict.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        device: Any = None,
        thresholds: analysis.MemoryThresholds | None = None,
    ) -> None:
        self.path = os.fspath(path) if path is not None else None
        self.device = device
        self.thresholds = thresholds
        self.last_report: analysis.OomReport | None = None

    def __enter__(self) -> oom_guard:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        if exc is None or not is_oom(exc):
            return False
        try:
            self.last_report = self._explain(exc, tb)
        except Exception as inner:  # the guard must never replace the user's error
            log.debug("rankscope oom_guard failed: %s", inner, exc_info=True)
        return False

    def _explain(self, exc: BaseException, tb: TracebackType | None) -> analysis.OomReport:
        frames = traceback.extract_tb(tb) if tb is not None else []
        device = snap.cuda_device_index(self.device)
        snapshot = snap.take_snapshot(cuda_device=device, tag="oom", uss=True)
        evidence = analysis.OomEvidence(
            error_type=type(exc).__name__,
            message=str(exc),
            snapshot=snapshot,
            phase=analysis.phase_of([(f.name, f.filename) for f in frames]),
            where=_user_frame(frames),
        )
        report = analysis.OomReport(
            error_type=evidence.error_type,
            where=evidence.where,
            phase=evidence.phase,
            findings=analysis.classify_oom(evidence, self.thresholds),
            parsed=analysis.parse_cuda_oom(evidence.message),
            snapshot=snapshot,
            time=time.time(),
            label=_label(),
        )
        report = dataclasses.replace(report, path=self._target())
        if snapshot.cuda is not None:  # who else held this GPU's memory (NVML, where present)
            tenants = worker_gpus.co_tenants(device)
            if tenants:
                report = dataclasses.replace(report, extra={**report.extra, "co_tenants": tenants})
        _write(report)
        summary = report.summary()
        log.error("%s", summary)
        if hasattr(exc, "add_note"):
            exc.add_note(summary)
        _emit(report)
        return report

    def _target(self) -> str:
        name = f"oom-{os.getpid()}-{time.strftime('%Y%m%d-%H%M%S')}.json"
        if self.path is not None:
            return self.path if self.path.endswith(".json") else os.path.join(self.path, name)
        return os.path.join(_default_dir(), name)


def _default_dir() -> str:
    run_dir = os.environ.get("RANKSCOPE_RUN_DIR")
    if run_dir:
        from rankscope.context import get_context

        try:
            return os.path.join(run_dir, get_context().job_id or "no-job")
        except Exception:
            return run_dir
    return os.path.join(tempfile.gettempdir(), "rankscope-oom")


def _write(report: analysis.OomReport) -> None:
    private_dirs(os.path.dirname(os.path.abspath(report.path)))
    write_text_atomically(report.path, json.dumps(report_json(report), indent=2))


def report_json(report: analysis.OomReport) -> dict[str, Any]:
    data = dataclasses.asdict(report)
    data["summary"] = report.summary()
    data["findings"] = [
        {"verdict": f.verdict.value, "message": f.message, "advice": f.advice}
        for f in report.findings
    ]
    return data


def _emit(report: analysis.OomReport) -> None:
    from rankscope.runtime.api import current_probe

    probe = current_probe()
    if probe is not None:
        probe.emit("memory.oom", report_json(report))


def _user_frame(frames: list[traceback.FrameSummary]) -> str:
    from rankscope.stacks.worker import is_library

    for f in reversed(frames):
        if not is_library(f.filename) and not f.filename.startswith(os.path.dirname(__file__)):
            return f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}"
    if frames:
        f = frames[-1]
        return f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}"
    return ""


def _label() -> str:
    from rankscope.context import get_context

    try:
        return get_context().label
    except Exception:
        return f"pid {os.getpid()}"
