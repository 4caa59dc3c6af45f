"""Tracing's public Python API: `span(name, **attrs)` and `debug_decorator` (worker-side, in
`worker_spans.py` and `worker_decorator.py`), and `enable_detailed_tracing()`: trace every rank
of this driver's job, and the driver itself (here: the driver drives a trace session as the CLI
does, through `collect.py`).

A context manager (or a plain switch: call it, later `.stop()`). Inside it every process of the
job with a probe records spans, step markers, collectives and memory; the driver records its
own spans, its `ray.get` / `ray.wait` waits and its task submissions (`submit NAME` spans that
carry the task's id, so the trace draws an arrow from each to the task's run). On exit the
trace is written (to `path`, else the run directory through the hub, else the temp folder) and
its path returned.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from typing import Any

from rankscope._version import __version__
from rankscope.context import get_context
from rankscope.runtime.api import current_probe
from rankscope.runtime.protocol import ProbeInfo, ProbeState, ProbeStatus
from rankscope.trace import worker
from rankscope.trace.chrome import DEFAULT_BUDGET
from rankscope.trace.collect import TraceSession, hub_asker, write_trace_file
from rankscope.trace.model import TraceOptions, TraceSummary
from rankscope.trace.worker_decorator import debug_decorator
from rankscope.trace.worker_spans import record_span, span

__all__ = ["debug_decorator", "enable_detailed_tracing", "span"]

log = logging.getLogger("rankscope.trace")
LOCAL_ID = "driver"


class enable_detailed_tracing:  # a class used like a function: `with ...():`
    """Trace every rank of this job while the block runs; the trace's path is `.path`.

    Example: `with rankscope.enable_detailed_tracing() as t: ray.get(refs)`, then `t.path`.
    `ranks` limits the ranks traced, `steps` stops each rank after that many steps.
    """

    def __init__(
        self,
        *,
        ranks: list[int] | None = None,
        steps: int | None = None,
        ray_tasks: bool = True,
        collectives: bool = True,
        memory_counters: bool = True,
        path: str | None = None,
        budget: int = DEFAULT_BUDGET,
        max_seconds: float = 3600.0,
    ) -> None:
        self.path: str | None = None
        self.summary: TraceSummary | None = None
        self._target = path
        self._budget = budget
        self._client: Any = None
        self._job_id = ""
        self._restore: dict[str, Any] = {}
        options = TraceOptions(
            ttl_s=max_seconds, steps=steps, collectives=collectives,
            memory_counters=memory_counters, ray_tasks=ray_tasks,
        )  # fmt: skip
        probes = self._probes(None if ranks is None else set(ranks))
        self._session = TraceSession(self._ask, probes, options)
        self._session.start(background=True)
        self._patch_ray()

    def __enter__(self) -> enable_detailed_tracing:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> str | None:
        """Stop every rank, write the trace; returns its path (idempotent)."""
        if self.path is not None or self._session is None:
            return self.path
        self._unpatch_ray()
        self._session.stop()
        self.summary = self._write()
        self.path = self.summary.path
        log.info("rankscope trace written to %s", self.path)
        return self.path

    # ---------------------------------------------------------------- helpers
    def _probes(self, ranks: set[int] | None) -> list[ProbeStatus]:
        """This process (always, as the driver), and every live probe of its job."""
        own = current_probe()
        local = _local_status(own.probe_id if own is not None else LOCAL_ID)
        self._job_id = local.context.job_id
        chosen = [local]
        try:
            from rankscope.runtime.client import HubClient
            from rankscope.runtime.hub import find_hub

            if find_hub() is not None:
                self._client = HubClient.attach()
                for p in self._client.probes(self._job_id):
                    if p.info.probe_id == local.info.probe_id or p.state == ProbeState.DEAD:
                        continue
                    if ranks is None or (p.context.rank is not None and p.context.rank in ranks):
                        chosen.append(p)
        except Exception as exc:  # no cluster or hub: the driver alone
            log.warning("rankscope: tracing this process only (%s)", exc)
            self._client = None
        return chosen

    def _ask(self, kind: str, probes: list[ProbeStatus], args: dict[str, Any]) -> list[Any]:
        out: list[Any] = []
        remote = [p for p in probes if p is not probes[0]]
        try:
            out.append((probes[0], worker.trace_command(args), ""))
        except Exception as exc:
            out.append((probes[0], None, f"{type(exc).__name__}: {exc}"))
        if remote and self._client is not None:
            out.extend(hub_asker(self._client)(kind, remote, args))
        return out

    def _write(self) -> TraceSummary:
        name = f"trace-{time.strftime('%Y%m%d-%H%M%S')}.json"
        if self._target is not None:
            return write_trace_file(self._session, self._job_id, self._target, budget=self._budget)
        temp = os.path.join(tempfile.gettempdir(), f"rankscope-{os.getpid()}-{name}")
        summary = write_trace_file(self._session, self._job_id, temp, budget=self._budget)
        if self._client is None:
            return summary
        try:  # into the run directory, beside the job's other reports
            with open(temp, encoding="utf-8") as f:
                path = self._client.write_artifact(self._job_id, name, f.read())
            os.unlink(temp)
        except Exception as exc:
            log.warning("rankscope: trace kept at %s (run directory: %s)", temp, exc)
            return summary
        from dataclasses import replace

        return replace(summary, path=path)

    def _patch_ray(self) -> None:
        """The driver's `ray.get` and `ray.wait` as spans, and its submissions, while tracing."""
        try:
            import ray
            from ray.actor import ActorMethod
            from ray.remote_function import RemoteFunction
        except ImportError:
            return
        for name in ("get", "wait"):
            original = getattr(ray, name)
            if getattr(original, "__rankscope__", False):
                continue
            wrapped = span(f"ray.{name}")(original)
            wrapped.__rankscope__ = True
            self._restore[name] = (ray, name, original)
            setattr(ray, name, wrapped)
        for owner, label in ((RemoteFunction, "_function_name"), (ActorMethod, "_method_name")):
            original = owner._remote
            if not getattr(original, "__rankscope__", False):
                self._restore[owner.__name__] = (owner, "_remote", original)
                owner._remote = _submitting(original, label)  # type: ignore[method-assign]

    def _unpatch_ray(self) -> None:
        for owner, name, original in self._restore.values():
            setattr(owner, name, original)
        self._restore.clear()


def _submitting(original: Any, label: str) -> Any:
    """`RemoteFunction._remote` / `ActorMethod._remote` that records a `submit NAME` span with
    the new task's id (the first returned ref's); the submission itself is untouched."""

    def submit(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.time_ns()
        refs = original(self, *args, **kwargs)
        try:
            first = refs[0] if isinstance(refs, list) and refs else refs
            task_id = first.task_id().hex()
            name = str(getattr(self, label, "task")).rsplit(".", 1)[-1]
            record_span(f"submit {name}", start, {"task_id": task_id})
        except Exception:  # no ref (num_returns=0), a generator: no arrow, never an error
            pass
        return refs

    submit.__rankscope__ = True  # type: ignore[attr-defined]
    return submit


def _local_status(probe_id: str) -> ProbeStatus:
    from rankscope.runtime.probe import progress

    context = get_context()
    now = time.time()
    info = ProbeInfo(probe_id, context, __version__, 0.0)
    return ProbeStatus(info, ProbeState.ALIVE, now, now, progress.snapshot(), 0, 0)
