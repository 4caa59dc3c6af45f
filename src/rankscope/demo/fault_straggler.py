"""`--fault straggler`: one rank computes 50 ms longer every step; the others wait for it.

In synchronous training every rank's step takes as long as the slowest rank's, so step times
alone name nobody; the monitor takes each rank's collective wait off its step time and finds
the rank whose compute stands out (a slow node, a bigger data shard, another job on its GPU).
"""

from __future__ import annotations

import time
from typing import Any

from rankscope.demo.model import Fault
from rankscope.demo.monitor_check import health, named
from rankscope.demo.session import DemoSession

EXTRA_S = 0.05
"""What the faulty rank adds to every step from `fault_step` on."""


def inject(worker: Any, step: int) -> None:
    time.sleep(EXTRA_S)


def diagnose(session: DemoSession) -> bool:
    from rankscope.monitor.model import FindingKind

    found = named(health(session), FindingKind.STRAGGLER)
    return [rank for rank, _ in found] == [session.fault_rank]


FAULT = Fault(
    "straggler",
    "one rank computes 50 ms longer every step",
    diagnose,
    inject,
    command="rankscope monitor",
)
