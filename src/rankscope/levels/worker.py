"""The worker side of `rankscope level`: the probe's `level` command switches this process's
debug level (and back after `for_s`), and answers with the level it is at."""

from __future__ import annotations

from typing import Any

from rankscope import level as _level
from rankscope.runtime.probe import Probe, register_handler, register_startup

__all__ = ["answer_level"]


@register_handler("level")
def answer_level(args: dict[str, Any]) -> _level.LevelState:
    """`{"level": "full", "sample_every": 10, "for_s": 600}` switches the level and/or the
    sampling (and both back after `for_s`); `{}` only reports."""
    sample = args.get("sample_every")
    for_s = args.get("for_s")
    if not args.get("level") and sample is not None and not for_s:
        # sampling only: a pending `--for` keeps its timer and the level it goes back to
        return _level.configure(sample_every=int(sample))
    if args.get("level") or sample is not None:
        return _level.set_level(
            str(args.get("level") or _level.current().level),
            for_s=float(for_s) if for_s else None,
            sample_every=int(sample) if sample is not None else None,
        )
    return _level.current()


@register_startup
def _take_init_level(probe: Probe) -> None:
    """`rankscope.init(level=...)` (or a RANKSCOPE_* override) given at start wins over the
    environment's level; a level set in code before `init()` stays when neither was given."""
    config = probe.config
    if config.level != _level.level_from_env():
        _level.set_level(config.level)
    if config.sample_every != _level.current().sample_every and config.sample_every != 1:
        _level.configure(sample_every=config.sample_every)
