"""Ranks that log through `DistributedLogger`, for the logs and alerts cluster tests."""

from __future__ import annotations

import contextlib
import os
import signal

import ray


class LogRank:
    """One rank of the `logs-test` group; its probe is started with rankscope.init()."""

    def __init__(
        self,
        rank: int,
        world_size: int,
        alert_threshold: float = 1.0,
        webhook: str = "",
        group: str = "logs-test",
    ) -> None:
        import rankscope

        self.rank = rank
        rankscope.init(rank=rank, world_size=world_size, group=group)
        self.log = rankscope.DistributedLogger(
            "train", aggregation_interval=1, alert_threshold=alert_threshold
        )
        if webhook:
            rankscope.configure_alerts(webhook=webhook)

    def pid(self) -> int:
        return os.getpid()

    def job_id(self) -> str:
        return ray.get_runtime_context().get_job_id()

    def log_step(self, loss: float) -> None:
        self.log.info("loss=%.3f", loss)
        self.log.warning("grad norm is large")
        print(f"plain print from rank {self.rank}", flush=True)

    def say(self, text: str) -> None:
        self.log.info(text)

    def errors(self, n: int) -> None:
        for i in range(n):
            self.log.error("batch %d failed: bad sample", i)

    def debug_capture(self, tag: str) -> str:
        """What `debug_decorator`-style capture sees: the level, and a DEBUG record."""
        from rankscope import level

        self.log.debug("captured args of %s", tag)
        return level.current().level

    def decorated_failure(self, tag: str) -> None:
        """A `debug_decorator` call that fails: its event carries the arguments only where
        capture is on (here: only through the level)."""
        import rankscope

        @rankscope.debug_decorator()
        def load_batch(batch_tag: str) -> None:
            raise ValueError("bad batch")

        with contextlib.suppress(ValueError):
            load_batch(batch_tag=tag)

    def die(self) -> None:
        self.log.warning("about to die")
        os.kill(os.getpid(), signal.SIGKILL)
