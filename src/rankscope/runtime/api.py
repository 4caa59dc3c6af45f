"""Starting and stopping the probe: `rankscope.init()`, `setup_worker()`, `step()`.

`init()` is idempotent and cheap after the first call, so libraries and user code may both call
it. `setup_worker()` is the zero-code-change entry for Ray's `worker_process_setup_hook` and
swallows every error: a broken rankscope must never stop a worker from starting.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from rankscope.config import Config
from rankscope.context import set_explicit_rank
from rankscope.runtime.probe import Probe, metrics_hooks, progress, step_hooks

log = logging.getLogger("rankscope")

_probe: Probe | None = None
_probe_pid = -1
_lock = threading.Lock()


def init(
    rank: int | None = None,
    world_size: int | None = None,
    *,
    local_rank: int | None = None,
    group: str | None = None,
    level: str | None = None,
    heartbeat_interval: float | None = None,
    hang_timeout: float | None = None,
) -> Probe | None:
    """Start this process's probe (idempotent); returns None when rankscope is off.

    Example: `rankscope.init(rank=dist.get_rank(), world_size=dist.get_world_size())`.
    Explicit ranks win over torch.distributed and RANK/WORLD_SIZE; leave them out to detect.
    `group` names the group the rank belongs to when there is no torch.distributed group to
    detect it from (ranks are unique within a group, not within a Ray job).
    """
    global _probe
    set_explicit_rank(rank=rank, world_size=world_size, local_rank=local_rank, group=group)
    with _lock:
        if _probe is not None and _probe.alive and _probe_pid == os.getpid():
            return _probe
        config = Config.from_env(
            level=level, heartbeat_interval=heartbeat_interval, hang_timeout=hang_timeout
        )
        if config.level == "off" or os.environ.get("RANKSCOPE_ROLE") in ("hub", "relay"):
            return None
        _start(config)
        return _probe


def _start(config: Config) -> None:
    global _probe, _probe_pid
    _probe = Probe(config)
    _probe_pid = os.getpid()
    _probe.start()


def setup_worker() -> None:
    """Entry for `runtime_env={"worker_process_setup_hook": "rankscope.setup_worker"}`."""
    try:
        init()
    except Exception as exc:  # never stop a worker from starting
        log.warning("rankscope: probe not started: %s", exc)


def step(loss: Any = None, tokens: Any = None, grad_norm: Any = None, **metrics: Any) -> None:
    """Mark one step of training, with its numbers; the hub shows the step and when it moved.

    Example: `rankscope.step(loss=loss.item(), tokens=batch_tokens, grad_norm=norm)`.
    Pass numbers: Python floats cost nothing more; a tensor is read with `.item()`, which waits
    for the device (read it where you already synchronize, e.g. after `clip_grad_norm_`).
    `tokens` is how many tokens this step processed; other keyword numbers are kept by name.
    Each rank keeps a bounded series; nothing here blocks or raises.
    """
    progress.tick()
    for hook in step_hooks:  # e.g. a sync debug session pausing this rank
        hook()
    if metrics_hooks:
        for metrics_hook in metrics_hooks:  # e.g. the monitor's per-rank series
            try:  # noqa: SIM105  (a bare try costs nothing; suppress() is a call)
                metrics_hook(
                    progress.step, progress.last_progress, loss, tokens, grad_norm, metrics
                )
            except Exception:  # never into the training code
                pass


def send_last_words() -> None:
    """Send this process's summaries to the hub now (a collective just failed); never raises."""
    probe = current_probe()
    if probe is not None:
        probe.send_last_words()


def current_probe() -> Probe | None:
    """This process's probe, if one is running."""
    if _probe is not None and _probe_pid == os.getpid():
        return _probe
    return None


def shutdown() -> None:
    """Stop this process's probe (tests and clean exits; workers need not call it)."""
    global _probe
    with _lock:
        if _probe is not None:
            _probe.stop()
        _probe = None
