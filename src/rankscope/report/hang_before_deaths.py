"""Which hang goes before the deaths in the verdict: one whose culprits live (the deaths
followed it), a mismatch whatever died after it, or the group judge's alert raised about a
rank not dead, before the first death (a desync a little after it). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rankscope.report.model import RunData
from rankscope.report.section_diagnosis import hang_group

__all__ = ["hang_before_deaths"]

Ranks = set[tuple[Any, Any]]
"""(group, rank) of processes, as their contexts name them."""


def hang_before_deaths(data: RunData, died: float) -> Mapping[str, Any] | None:
    """The hang finding that explains the deaths (the first one at `died`), or None."""
    dead = {
        (p["info"]["context"].get("group"), p["info"]["context"].get("rank"))
        for p in data.processes
        if p.get("state") == "dead"
    }
    return _with_live_culprits(data, dead) or _judged_before(data, died, dead)


JUDGED = {"desync": "mismatch", "hang": "hang"}
"""The group judge's alerts that are a hang finding raised live (`hang.worker_group_judge`)."""
DESYNC_AFTER_S = 10.0
"""A desync raised this long after the first death still caused it: gloo aborts the process
that receives another size at once, before the judge's next look; a death never makes a live
rank call another collective."""


def _judged_before(data: RunData, died: float, dead: Ranks) -> Mapping[str, Any] | None:
    """The group judge's desync alert (up to `DESYNC_AFTER_S` after the first death) or hang
    alert (before it) about a rank not dead: the death followed it, and the live hang
    analysis, which reads the living only, may no longer see it. As a hang finding."""
    for e in sorted(data.events, key=lambda e: float(e.get("time") or 0.0)):
        p = e.get("payload") or {}
        rank, rule = p.get("rank"), str(p.get("rule"))
        if e.get("kind") != "alert" or rule not in JUDGED or rank is None:
            continue
        limit = died + (DESYNC_AFTER_S if rule == "desync" else 0.0)
        if float(e.get("time") or 0.0) <= limit and (p.get("group"), rank) not in dead:
            kind = JUDGED[rule]
            return {
                "kind": kind,
                "ranks": [rank],
                "message": p.get("message"),
                "group": p.get("group"),
            }
    return None


CAUSES_DEATHS = ("mismatch", "cross_group_deadlock")
"""Hang findings that are a program's error, never a death's consequence (a death makes no rank
call another collective): the story whether their culprits died after or not."""


def _with_live_culprits(data: RunData, dead: Ranks) -> Mapping[str, Any] | None:
    """A hang finding whose culprits live (the deaths followed it), or a mismatch."""
    for report in data.hang:
        for f in report.get("findings", ()):
            if f.get("kind") not in ("hang", *CAUSES_DEATHS):
                continue
            ranks = f.get("ranks") or ()
            group = hang_group(report, f, data)
            alive = all((group, r) not in dead for r in ranks)
            if ranks and (alive or f.get("kind") in CAUSES_DEATHS):
                return {**f, "group": group}
    return None
