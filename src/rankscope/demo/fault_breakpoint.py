"""`--fault breakpoint`: one rank stops at a conditional breakpoint; the driver shows the session.

The faulty rank pauses with `sync=True`, so the other ranks wait in `rankscope.step()` instead of
running into their collective timeout. Nobody attaches in a non-interactive run: the session
times out, the rank continues and the demo trains to the end. From another terminal, attach
within the timeout with the command the demo prints.
"""

from __future__ import annotations

import time
from typing import Any

from rankscope.demo.model import Fault
from rankscope.demo.session import DemoSession

BREAKPOINT_TIMEOUT_S = 15.0
"""Seconds the paused rank waits for a client before it continues on its own."""


def inject(worker: Any, step: int) -> None:
    import rankscope

    if step != worker.fault_step:
        return
    rankscope.enable_full_debugging()
    loss_is_suspicious = True  # what a user would compute, e.g. `loss > 10 * running_mean`
    rankscope.conditional_breakpoint(
        lambda: loss_is_suspicious,
        rank_filter=worker.fault_rank,
        name="suspicious-loss",
        timeout=BREAKPOINT_TIMEOUT_S,
        sync=True,
    )


def diagnose(session: DemoSession) -> bool:
    import ray

    from rankscope.debug.collect import debug_list, list_sessions
    from rankscope.debug.render import render_sessions
    from rankscope.runtime.ask import Selection

    this_job = Selection(session.job_id)
    found: list[Any] = []

    def listings() -> list[Any]:
        return list_sessions(None, this_job, client=session.client)

    def paused() -> bool:
        found[:] = [s for listing in listings() for s in listing.sessions]
        return bool(found)

    session.wait_for(paused, what="the breakpoint")
    listed = debug_list(None, this_job)
    for listing in listed.jobs:
        session.console.print(render_sessions(listing, listed.routes))
    opened = found[0]
    session.console.print(
        f"\n`rankscope debug list` shows the paused rank; from another terminal run "
        f"`rankscope debug attach {opened.id}` within {BREAKPOINT_TIMEOUT_S:g}s "
        "(p, n, s, w, interact; c continues). The other ranks wait in rankscope.step() meanwhile."
    )
    started = time.time()
    losses = ray.get(session.runs)
    session.console.print(
        f"the session ended after {time.time() - started:.0f}s; all {session.workers} ranks "
        f"trained {len(losses[0])} steps"
    )
    return (
        opened.rank == session.fault_rank
        and opened.function == "inject"
        and not any(listing.sessions for listing in listings())
    )


FAULT = Fault(
    "breakpoint",
    "one rank pauses at a conditional breakpoint (sync)",
    diagnose,
    inject,
    command="rankscope debug list",
)
