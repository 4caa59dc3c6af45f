"""What a fault's diagnosis gets to work with on the driver side of the demo."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.console import Console

if TYPE_CHECKING:
    from rankscope.runtime.client import HubClient
    from rankscope.runtime.protocol import ProbeStatus

WAIT_TIMEOUT_S = 120.0


@dataclass
class DemoSession:
    """The running demo: its ranks (Ray actors), their training calls, and the hub."""

    fault: str
    workers: int
    steps: int
    fault_rank: int
    fault_step: int
    actors: list[Any]
    runs: list[Any]
    """ObjectRefs of each rank's `train(steps)` call, in rank order."""
    client: HubClient
    console: Console
    run_dir: str
    job_id: str
    """This driver's Ray job: the hub also keeps earlier jobs' ranks (`--fault all`)."""
    others: list[Any] = field(default_factory=list)
    """Actors a fault's diagnosis started beside the ranks: ended with them, after the job's
    report (which shows them live), and by Ray with the job in any case."""

    def ranked_probes(self) -> list[ProbeStatus]:
        probes = [p for p in self.client.probes(self.job_id) if p.context.rank is not None]
        return sorted(probes, key=lambda p: p.context.rank or 0)

    def flush_events(self) -> None:
        """Wait until every rank's probe has sent what it emitted so far (two heartbeats: one
        already on its way may have left before the event was queued), before the demo ends
        the ranks and the report reads the run directory."""
        for _ in range(2):
            since = time.time()
            self.wait_for(functools.partial(self._heard_since, since), "the probes' heartbeats")

    def _heard_since(self, since: float) -> bool:
        return all(p.last_seen > since for p in self.ranked_probes() if p.state.value == "alive")

    def wait_for(self, done: Callable[[], bool], what: str) -> None:
        deadline = time.time() + WAIT_TIMEOUT_S
        while not done():
            if time.time() > deadline:
                raise RuntimeError(f"the demo timed out waiting for {what}")
            time.sleep(0.25)
