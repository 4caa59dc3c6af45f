"""The CLI side of `rankscope level`: ask (or switch) the selected ranks through their probes."""

from __future__ import annotations

from rankscope.levels.model import RankLevel
from rankscope.runtime import deadlines
from rankscope.runtime.ask import Command, Selection, ask_one, select
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeState

__all__ = ["switch_levels"]

NO_ANSWER = "did not answer"


def switch_levels(
    address: str | None,
    selection: Selection,
    *,
    level: str | None = None,
    for_s: float | None = None,
    sample_every: int | None = None,
) -> list[RankLevel]:
    """Each selected live process's level (switched first when `level` or `sample_every` is
    given)."""
    client = HubClient.attach(address)
    args: dict[str, object] = {}
    if level or sample_every is not None:
        args = {"level": level, "for_s": for_s, "sample_every": sample_every}
    rows: list[RankLevel] = []
    for job_id, probes in select(client, selection).items():
        chosen = [p for p in probes if p.state != ProbeState.DEAD]
        if not chosen:
            continue
        answers = ask_one(client, chosen, Command("level", args), deadlines.HUB_DEFAULT)
        states = answers.payloads()
        errors = dict((p.info.probe_id, why) for p, why in answers.unanswered(silent=NO_ANSWER))
        for p in chosen:
            pid = p.info.probe_id
            state = states.get(pid)
            error = "" if pid in states else errors.get(pid, NO_ANSWER)
            rows.append(
                RankLevel(job_id, p.context.label, p.context.rank, p.context.pid, state, error)
            )
    return rows
