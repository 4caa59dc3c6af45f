"""Settings shared by the probe, the hub and the CLI, read once from the environment.

Every knob has an environment variable (RANKSCOPE_<FIELD>) so that workers started with no
code change (`worker_process_setup_hook`) can still be tuned from the job's runtime_env.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from rankscope.errors import UserError
from rankscope.level import LEVELS, level_from_env

HUB_NAME = "rankscope_hub"


def hub_namespace() -> str:
    """The Ray namespace of the hub; RANKSCOPE_NAMESPACE gives separate teams separate hubs."""
    return os.environ.get("RANKSCOPE_NAMESPACE", "rankscope")


@dataclass(frozen=True)
class Config:
    """Tunables; `Config.from_env()` overlays RANKSCOPE_* variables on the defaults.

    Example: `Config.from_env(heartbeat_interval=0.5)`.
    """

    level: str = "light"
    """off / light / full (`rankscope.level`); RANKSCOPE_LEVEL, or RANKSCOPE_DEBUG=1 for full."""
    sample_every: int = 1
    """Full-level features run on every Nth step only (`rankscope.configure(sample_every=N)`)."""
    heartbeat_interval: float = 1.0
    """Seconds between a probe's heartbeats (its long poll returns at least this often)."""
    dead_after: float = 5.0
    """A probe silent for this long is checked for liveness and shown as dead or unresponsive."""
    command_deadline: float = 3.0
    """Seconds the hub waits for probes to answer a command before calling them unresponsive."""
    handler_budget: float = 2.0
    """Seconds a probe waits for a heavy command (`memory`), run on its own worker thread, before
    answering that it took too long; keep it below `command_deadline` (and the CLI's 3 s) so the
    error, not silence, reaches the user. Light commands (stacks) run inline and have no limit."""
    suspects_interval: float = 10.0
    """Seconds the `memory` command reuses its last tracemalloc comparison (the suspects) before
    taking a new tracemalloc snapshot, which holds the GIL for its whole duration; 0: every time."""
    event_queue_size: int = 10_000
    """Events a probe buffers while the hub is away; older ones are dropped and counted."""
    hub_event_queue_size: int = 100_000
    """Events the hub buffers before its writer falls behind; beyond it they are dropped."""
    mailbox_size: int = 64
    """Commands waiting for one probe; beyond it the oldest is dropped and counted."""
    reconnect_max_backoff: float = 10.0
    relay_above: int = 256
    """The hub asks probes to poll through a relay actor on their node (one batched hub call per
    node, `runtime.relay`) while more than this many probes are live; 0: always, -1: never. A
    probe's own setting 0 or -1 forces it either way (RANKSCOPE_RELAY_ABOVE in the job's env
    reaches both). The whole test suite passes with relays forced on (0)."""
    hang_timeout: float = 300.0
    """Seconds inside one collective, or without a `rankscope.step()`, before the watchdog
    writes a cluster-wide hang report."""
    run_dir: str = ""
    """Where the hub writes events and reports; empty: inside the Ray session directory."""

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise UserError(f"RANKSCOPE_LEVEL={self.level!r} is not one of {', '.join(LEVELS)}")
        for name in (
            "heartbeat_interval",
            "dead_after",
            "command_deadline",
            "hang_timeout",
            "handler_budget",
        ):
            if getattr(self, name) <= 0:
                raise UserError(f"{name} must be > 0 seconds, got {getattr(self, name)}")
        if self.suspects_interval < 0:
            raise UserError(f"suspects_interval must be >= 0 seconds, got {self.suspects_interval}")
        if self.sample_every < 1:
            raise UserError(f"RANKSCOPE_SAMPLE_EVERY must be >= 1, got {self.sample_every}")

    @classmethod
    def from_env(cls, **overrides: object) -> Config:
        """Defaults, then RANKSCOPE_* environment variables, then explicit overrides."""
        values: dict[str, object] = {}
        if not os.environ.get("RANKSCOPE_LEVEL") and level_from_env() == "full":
            values["level"] = "full"  # RANKSCOPE_DEBUG=1
        for f in dataclasses.fields(cls):
            raw = os.environ.get(f"RANKSCOPE_{f.name.upper()}")
            if raw is None:
                continue
            kind: type = type(f.default)
            try:
                values[f.name] = kind(raw)
            except ValueError:
                raise UserError(
                    f"RANKSCOPE_{f.name.upper()}={raw!r} is not a valid {kind.__name__}"
                ) from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]
