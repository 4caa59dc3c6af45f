"""User code for the debug-session tests: ranks that stop at conditional breakpoints or raise."""

from __future__ import annotations

import logging
import os
import time


class _Remember(logging.Handler):
    """What the worker's own logging setup would show: rankscope's log lines, kept in a list."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines = [*self.lines[-200:], record.getMessage()]


class DebugRank:
    """One rank of a job with debugging on (`enable_full_debugging`)."""

    def __init__(self, rank: int, world_size: int) -> None:
        import rankscope

        self.rank = rank
        self.log = _Remember()
        logging.getLogger("rankscope").addHandler(self.log)
        logging.getLogger("rankscope").setLevel(logging.INFO)
        rankscope.init(rank=rank, world_size=world_size)
        rankscope.enable_full_debugging()

    def pid(self) -> int:
        return os.getpid()

    def set_debugging(self, on: bool) -> None:
        import rankscope

        if on:
            rankscope.enable_full_debugging()
        else:
            rankscope.enable_lightweight_monitoring()

    def logs(self) -> list[str]:
        return list(self.log.lines)

    def stop_here(
        self,
        timeout: float | None = 60.0,
        condition: bool = True,
        sync: bool = False,
        backend: str = "pdb",
    ) -> int:
        import rankscope

        some_local = {"rank": self.rank, "answer": 42}
        rankscope.conditional_breakpoint(
            condition,
            rank_filter=lambda r: r == 0,
            name="check",
            timeout=timeout,
            sync=sync,
            backend=backend,
        )
        return some_local["answer"]

    def train(self, steps: int, interval: float = 0.05) -> list[float]:
        """A loop calling rankscope.step(); returns when each step finished."""
        import rankscope

        finished = []
        for _ in range(steps):
            time.sleep(interval)
            rankscope.step()
            finished.append(time.time())
        return finished

    def fail_in_rank(self, fail_rank: int) -> int:
        value = self.rank * 10
        if self.rank == fail_rank:
            raise ValueError(f"bad batch on rank {self.rank}")
        return value
