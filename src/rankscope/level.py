"""The debug level of this process: the one place that owns it.

`off` (no probe when set at start; switched live, features stop recording and the heartbeat
stays, so the rank can be switched back), `light` (the default: probe, recorder, watchdog,
summaries) and `full` (also tracing, `debug_decorator` argument capture, breakpoints, memory
tracking). Set at start by RANKSCOPE_LEVEL (RANKSCOPE_DEBUG=1 is a shorthand for `full`), for
the process by `enable_full_debugging()` / `enable_lightweight_monitoring()`, live by
`rankscope level full --ranks 3 [--sample-every 10] [--for 10m]` through the probe. Full-level
features read `full_at(step)`, which also applies `configure(sample_every=N)`
(RANKSCOPE_SAMPLE_EVERY, or `--sample-every` live).

Reading the level is one module attribute (`level.FULL`), cheap enough for every call of a hot
function. No feature is imported here.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from rankscope.errors import UserError

__all__ = [
    "LEVELS",
    "LevelState",
    "configure",
    "current",
    "enable_full_debugging",
    "enable_lightweight_monitoring",
    "full_at",
    "full_enabled",
    "level_from_env",
    "on_change",
    "parse_level",
    "parse_sample_every",
    "recording",
    "set_level",
]

LEVELS = ("off", "light", "full")
_TRUE = ("1", "true", "yes", "on")


def parse_level(raw: str, *, what: str = "level") -> str:
    """`"FULL "` -> `"full"`; anything else than off/light/full is a `UserError`."""
    value = raw.strip().lower()
    if value not in LEVELS:
        raise UserError(f"{what} {raw!r} is not one of {', '.join(LEVELS)}")
    return value


def level_from_env(environ: Mapping[str, str] = os.environ) -> str:
    """RANKSCOPE_LEVEL when set, else `full` when RANKSCOPE_DEBUG=1, else `light`."""
    raw = environ.get("RANKSCOPE_LEVEL", "").strip()
    if raw:
        return parse_level(raw, what="RANKSCOPE_LEVEL=")
    if environ.get("RANKSCOPE_DEBUG", "").strip().lower() in _TRUE:
        return "full"
    return "light"


def parse_sample_every(raw: str, *, what: str = "--sample-every") -> int:
    """`" 10"` -> 10; zero, negative, fractional or non-numeric text is a `UserError`."""
    value = raw.strip()
    if not value.isdigit() or int(value) < 1:
        raise UserError(f"{what} {raw!r} must be a whole number >= 1")
    return int(value)


def sample_every_from_env(environ: Mapping[str, str] = os.environ) -> int:
    raw = environ.get("RANKSCOPE_SAMPLE_EVERY", "").strip()
    return parse_sample_every(raw, what="RANKSCOPE_SAMPLE_EVERY=") if raw else 1


@dataclass(frozen=True)
class LevelState:
    """What `rankscope level` shows for one process."""

    level: str
    sample_every: int = 1
    until: float | None = None
    """When a temporary level (`--for`) ends; None: it stays."""
    back_to: str | None = None
    """The level it returns to at `until`."""
    back_sample_every: int | None = None
    """The sampling it returns to at `until` (a live `--sample-every` with `--for`)."""


def _safe_env_level() -> str:
    try:
        return level_from_env()
    except UserError:  # Config.from_env reports the bad value; here we keep the default
        return "light"


def _safe_env_sample() -> int:
    try:
        return sample_every_from_env()
    except UserError:
        return 1


_lock = threading.Lock()
_state = LevelState(_safe_env_level(), _safe_env_sample())
_timer: threading.Timer | None = None
_listeners: list[Callable[[str], None]] = []

FULL: bool = _state.level == "full"
"""True while the level is `full`; the one global a disabled hot path reads."""
RECORDING: bool = _state.level != "off"


def current() -> LevelState:
    """This process's level, sampling and pending switch back."""
    return _state


def full_enabled() -> bool:
    return FULL


def recording() -> bool:
    """False at `off`: features keep their heartbeat but record nothing."""
    return RECORDING


def full_at(step: int) -> bool:
    """Full-level work at this step: the level is `full` and the step is a sampled one."""
    return FULL and (_state.sample_every <= 1 or step % _state.sample_every == 0)


def on_change(fn: Callable[[str], None]) -> Callable[[str], None]:
    """Call `fn(level)` after every change (features that start or stop recorders)."""
    _listeners.append(fn)
    return fn


def set_level(
    level: str, *, for_s: float | None = None, sample_every: int | None = None
) -> LevelState:
    """Switch this process's level (and sampling); with `for_s`, back to the present level and
    sampling after that long (a switch during a pending one keeps the original to return to).

    Example: `set_level("full", for_s=600, sample_every=10)`.
    """
    global _state, _timer, FULL, RECORDING
    value = parse_level(level)
    if for_s is not None and for_s <= 0:
        raise UserError(f"for_s must be > 0 seconds, got {for_s}")
    if sample_every is not None:
        _check_sample_every(sample_every)
    with _lock:
        if _timer is not None:
            _timer.cancel()
            _timer = None
        pending = _state.back_to is not None
        back_to = (_state.back_to or _state.level) if for_s is not None else None
        back_sample = None
        if for_s is not None:
            back_sample = _state.back_sample_every if pending else _state.sample_every
        until = time.time() + for_s if for_s is not None else None
        sample = sample_every if sample_every is not None else _state.sample_every
        _state = LevelState(value, sample, until, back_to, back_sample)
        FULL, RECORDING = value == "full", value != "off"
        if for_s is not None and back_to is not None:
            _timer = threading.Timer(for_s, _switch_back, args=(back_to, back_sample))
            _timer.name = "rankscope-level"
            _timer.daemon = True
            _timer.start()
    for fn in list(_listeners):
        with contextlib.suppress(Exception):  # a feature's listener must not break the switch
            fn(value)
    return _state


def _switch_back(level: str, sample_every: int | None) -> None:
    set_level(level, sample_every=sample_every)


def _check_sample_every(sample_every: object) -> None:
    if isinstance(sample_every, bool) or not isinstance(sample_every, int) or sample_every < 1:
        raise UserError(f"sample_every must be a whole number >= 1, got {sample_every!r}")


def configure(*, sample_every: int | None = None, level: str | None = None) -> LevelState:
    """Sampling of the full-level features (every Nth step) and, optionally, the level.

    Example: `rankscope.configure(sample_every=10)`.
    """
    global _state
    if sample_every is not None:
        _check_sample_every(sample_every)
        with _lock:
            _state = replace(_state, sample_every=sample_every)
    if level is not None:
        set_level(level)
    return _state


def enable_full_debugging() -> None:
    """Debug level `full` in this process: breakpoints stop, argument capture, tracing.

    Example: `rankscope.enable_full_debugging()` at the top of a worker's `__init__`.
    """
    set_level("full")


def enable_lightweight_monitoring() -> None:
    """Debug level `light` in this process: the probe and its summaries only."""
    set_level("light")
