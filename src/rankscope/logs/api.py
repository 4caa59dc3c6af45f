"""The logs feature's public Python API: `DistributedLogger`, a standard logger whose records land
in this rank's JSON Lines file, and `capture_logging` (the worker-side handler, `worker.py`).

It is a `logging.LoggerAdapter` over `logging.getLogger(name)`: the stdlib's levels, handlers,
filters and `%`-formatting work as usual, other handlers may be added to `.logger`, and `extra=`
fields are kept in the file. At the `full` debug level (`rankscope level full --ranks 3`) its
DEBUG records are written too, without touching the logger's own level.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

from rankscope import level as _level
from rankscope.logs import worker_summary
from rankscope.logs.worker import capture_logging

__all__ = ["DistributedLogger", "capture_logging"]


class DistributedLogger(logging.LoggerAdapter[logging.Logger]):
    """Rank-tagged logging, aggregated across the cluster, with alerts.

    Example: `log = rankscope.DistributedLogger("trainer"); log.info("loss=%.3f", loss)`.

    Every record goes at once to this rank's file on its node (`rankscope logs` reads them);
    every `aggregation_interval` seconds the probe sends per-template counts and number ranges
    to the hub; host memory above `alert_threshold` (a fraction) raises an alert.
    """

    def __init__(
        self,
        name: str,
        aggregation_interval: float = 10.0,
        alert_threshold: float = 0.9,
        *,
        level: int = logging.INFO,
        extra: dict[str, Any] | None = None,
    ) -> None:
        if aggregation_interval <= 0:
            raise ValueError(
                f"aggregation_interval must be > 0 seconds, got {aggregation_interval}"
            )
        if not 0.0 < alert_threshold <= 1.0:
            raise ValueError(f"alert_threshold must be a fraction in (0, 1], got {alert_threshold}")
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:  # else INFO would follow the root's WARNING
            logger.setLevel(level)
        capture_logging([name])
        worker_summary.set_settings(
            aggregation_interval=float(aggregation_interval), alert_threshold=float(alert_threshold)
        )
        super().__init__(logger, extra or {})
        self.aggregation_interval = float(aggregation_interval)
        self.alert_threshold = float(alert_threshold)

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        if self.extra:
            kwargs["extra"] = {**self.extra, **(kwargs.get("extra") or {})}
        return msg, kwargs

    def isEnabledFor(self, level: int) -> bool:
        if self.logger.isEnabledFor(level):
            return True
        return _level.FULL and level >= logging.DEBUG and not self.logger.disabled

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        if not self.isEnabledFor(level):
            return
        msg, options = self.process(msg, kwargs)
        options["stacklevel"] = int(options.get("stacklevel", 1)) + 1  # the caller, not us
        self.logger._log(level, msg, args, **options)
