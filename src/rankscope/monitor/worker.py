"""The worker side: every rank's bounded step series, its heartbeat summary and probe command.

`rankscope.step(loss=..., tokens=..., grad_norm=...)` calls `_on_step` on the training thread:
one tuple appended to a bounded deque, and a NaN/Inf check (`x - x != 0`), nothing else. The
probe thread builds the summary and answers the `monitor` command from that deque.
"""

from __future__ import annotations

import collections
import itertools
import statistics
import threading
import time
from typing import Any

from rankscope import level as _level
from rankscope.context import get_context
from rankscope.monitor.alert_rules import NONFINITE_SETTLE_S
from rankscope.monitor.io_history import history_writer
from rankscope.monitor.model import (
    MemoryUse,
    MonitorSummary,
    NonFinite,
    RankSeries,
    StepSample,
    nonfinite_text,
)
from rankscope.monitor.worker_tap import SpanTap
from rankscope.runtime.probe import register_handler, register_metrics_hook, register_summary

__all__ = ["StepRecorder", "step_recorder"]

DEFAULT_CAPACITY = 1024
"""Steps each rank keeps (about 100 KB)."""
SUMMARY_STEPS = 10
"""Recent steps the heartbeat summary takes its medians over."""
COLLECTIVES_SENT = 1024
ALERTS_EVERY_S = 10.0
"""The summary redoes this rank's own findings at most this often (a few ms of the probe thread)."""
ALERT_STEPS = 200
"""...over this many recent steps."""
MAX_ALERTS, MAX_ALERT_CHARS = 4, 240
"""The summary's alerts stay under about 1 KB (the heartbeat's budget is a few KB)."""


def _number(value: Any) -> float | None:
    """A float from a Python number or a one-element tensor (`.item()` waits for the device)."""
    try:
        return float(value.item()) if hasattr(value, "item") else float(value)
    except Exception:
        return None


Row = tuple[int, float, Any, Any, Any]


class StepRecorder:
    """The per-rank series; written by the training thread, read by the probe thread."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self.rows: collections.deque[Row] = collections.deque(maxlen=capacity)
        self.total = 0
        self.first_nonfinite: NonFinite | None = None
        self.nonfinite_judge_at: float | None = None
        self.alerts: tuple[str, ...] = ()
        self.alerts_at = 0.0
        self._lock = threading.Lock()  # only for the first non-finite, written once

    def on_step(
        self,
        step: int,
        t: float,
        loss: Any,
        tokens: Any,
        grad_norm: Any,
        metrics: dict[str, Any],
    ) -> None:
        """One step's numbers; the training thread's whole cost of the monitor."""
        if loss is not None and type(loss) is not float:
            loss = _number(loss)
        if grad_norm is not None and type(grad_norm) is not float:
            grad_norm = _number(grad_norm)
        if tokens is not None and type(tokens) is not int and type(tokens) is not float:
            tokens = _number(tokens)
        self.rows.append((step, t, loss, tokens, grad_norm))
        self.total += 1
        if self.first_nonfinite is None:
            if loss is not None and loss - loss != 0:  # NaN or +-Inf, one subtraction
                self.nonfinite(step, t, "loss", loss)
            elif grad_norm is not None and grad_norm - grad_norm != 0:
                self.nonfinite(step, t, "grad_norm", grad_norm)
            elif metrics:
                for name, value in metrics.items():
                    v = value if type(value) is float else _number(value)
                    if v is not None and v - v != 0:
                        self.nonfinite(step, t, name, v)
                        break

    def nonfinite(
        self, step: int, t: float, name: str, value: float, module: str = "", tensor: str = ""
    ) -> None:
        """Keep the first NaN/Inf only."""
        with self._lock:
            if self.first_nonfinite is not None:
                return
            self.first_nonfinite = NonFinite(step, t, name, nonfinite_text(value), module, tensor)
        _emit("monitor.non_finite", {"step": step, "what": self.first_nonfinite.where})

    def samples(self, last: int | None = None) -> tuple[StepSample, ...]:
        rows = list(self.rows)  # a copy: the training thread keeps appending
        if last is not None:
            rows = rows[-last:]
        return tuple(StepSample(*row) for row in rows)

    def clear(self) -> None:
        self.rows.clear()
        self.total = 0
        self.first_nonfinite = None


_recorder = StepRecorder()
_tap = SpanTap()
history_writer().rows_at_exit = lambda: (list(_recorder.rows), _recorder.first_nonfinite)


def _emit(kind: str, payload: dict[str, Any]) -> None:
    """An event in the run directory (through this process's probe, when one runs)."""
    try:
        from rankscope.runtime.api import current_probe

        probe = current_probe()
        if probe is not None:
            probe.emit(kind, payload)
    except Exception:
        pass


def step_recorder() -> StepRecorder:
    """This process's recorder."""
    return _recorder


@register_metrics_hook
def _on_step(
    step: int, t: float, loss: Any, tokens: Any, grad_norm: Any, metrics: dict[str, Any]
) -> None:
    if _level.RECORDING:  # level `off`: nothing recorded (one global read)
        _recorder.on_step(step, t, loss, tokens, grad_norm, metrics)


def memory_use() -> MemoryUse:
    """Device (the current CUDA device, when torch already uses one) and node memory now."""
    from rankscope.memory import worker_snapshot as snap

    device_used = device_total = host_used = host_total = 0
    try:
        _, _, _, host_total, available = snap.host_memory(uss=False)
        host_used = max(0, host_total - available)
    except Exception:
        pass
    torch = snap.torch_if_loaded()
    try:
        if torch is not None and torch.cuda.is_initialized():
            free, total = torch.cuda.mem_get_info()
            device_used, device_total = int(total - free), int(total)
    except Exception:
        pass
    return MemoryUse(device_used, device_total, host_used, host_total)


def _recorded_collectives(last: int | None = None) -> tuple[Any, ...]:
    try:
        from rankscope.hang.worker_recorder import collective_recorder

        return collective_recorder().snapshot(last=last).records
    except Exception:
        return ()


def _series() -> RankSeries:
    ctx = get_context()
    samples = _recorder.samples()
    return RankSeries(
        rank=ctx.rank if ctx.rank is not None else -1,
        group=ctx.group or "",
        node=ctx.node_ip or ctx.hostname,
        role=ctx.actor_class or "",
        samples=samples,
        first_nonfinite=_recorder.first_nonfinite,
        memory=memory_use(),
        collectives=tuple(r for r in _recorded_collectives(COLLECTIVES_SENT) if not r.p2p),
        dropped=max(0, _recorder.total - _recorder.capacity),
        phases=_tap.phases(samples),
    )


@register_handler("monitor")
def _monitor_command(args: dict[str, Any]) -> RankSeries:
    return _series()


@register_summary("monitor")
def summary() -> MonitorSummary | None:
    """A fixed-size summary of the recent steps (None before the first `step()` with numbers,
    and at level `off`); every `ALERTS_EVERY_S` it also raises this rank's alerts, and on the
    group's rank 0 judges the group's (stragglers, loss disagreement)."""
    from rankscope.monitor import worker_alerts
    from rankscope.monitor.collectives import step_waits

    if not _level.RECORDING:
        return None
    _tap.poll(stepping=_recorder.total > 0)
    history_writer().on_heartbeat(list(_recorder.rows), _recorder.first_nonfinite)
    samples = _recorder.samples(last=SUMMARY_STEPS + 1)
    if not samples:
        # a client left unchanged marks no steps; its collectives still show a straggler
        if time.monotonic() - _recorder.alerts_at >= ALERTS_EVERY_S and _recorded_collectives(1):
            _recorder.alerts_at = time.monotonic()
            worker_alerts.judge_group()
        return None
    times = [s.t for s in samples]
    durations = [b - a for a, b in itertools.pairwise(times)]
    rates = [
        s.tokens / d
        for s, d in zip(samples[1:], durations, strict=True)
        if s.tokens is not None and d > 0
    ]
    waits = step_waits(times, _recorded_collectives(64)) if len(times) > 1 else []
    memory = memory_use()
    now = time.monotonic()
    new_nonfinite = _recorder.first_nonfinite is not None and not any(
        a.startswith("first ") for a in _recorder.alerts
    )
    if new_nonfinite:  # judged once the other ranks' heartbeats have said theirs
        _recorder.nonfinite_judge_at = now + NONFINITE_SETTLE_S
    settled = _recorder.nonfinite_judge_at is not None and now >= _recorder.nonfinite_judge_at
    if now - _recorder.alerts_at >= ALERTS_EVERY_S or new_nonfinite or settled:
        _recorder.alerts_at = now
        _recorder.alerts = _local_alerts(memory)
        if settled:
            _recorder.nonfinite_judge_at = None
        worker_alerts.judge_group()
    return MonitorSummary(
        step=samples[-1].step,
        step_s=statistics.median(durations) if durations else 0.0,
        tokens_per_s=statistics.median(rates) if rates else 0.0,
        loss=samples[-1].loss,
        grad_norm=samples[-1].grad_norm,
        wait_s=statistics.median(waits) if waits else 0.0,
        memory=memory,
        first_nonfinite=_recorder.first_nonfinite,
        alerts=_recorder.alerts,
        loss_level=_loss_level(samples),
        steps_over=len(durations),
    )


def _loss_level(samples: tuple[StepSample, ...]) -> float | None:
    finite = [s.loss for s in samples if s.loss is not None and s.loss - s.loss == 0]
    return statistics.median(finite) if finite else None


def _local_alerts(memory: MemoryUse) -> tuple[str, ...]:
    """This rank's own findings over its recent steps, one line each; the alerted kinds are
    also raised as alerts (`monitor.worker_alerts`)."""
    from rankscope.monitor import analysis, worker_alerts
    from rankscope.monitor.model import Thresholds

    ctx = get_context()
    rank = -1 if ctx.rank is None else ctx.rank
    thresholds = Thresholds()
    nonfinite = _recorder.first_nonfinite
    try:
        found = analysis.rank_findings(_recorder.samples(ALERT_STEPS), thresholds, rank=rank)
        found += analysis.memory_findings(rank, memory, thresholds)
        first = analysis.first_nonfinite([RankSeries(rank, ctx.group or "", "", "", (), nonfinite)])
    except Exception:  # the summary must go out whatever the analysis does
        return ()
    own = [first] if first is not None and ctx.rank is None else []  # no group to judge it
    worker_alerts.raise_local(own + found)  # a rank's first NaN is its group judge's to name
    lines = [f"first {nonfinite.where}"] if nonfinite is not None else []
    lines += [f.evidence for f in found]
    return tuple(line[:MAX_ALERT_CHARS] for line in lines[:MAX_ALERTS])
