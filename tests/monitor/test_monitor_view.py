"""`rankscope top`'s order, pure: the rank a problem started on comes before the ranks it
spread to, however many alerts those collected."""

from __future__ import annotations

from rankscope.monitor.model import MemoryUse, MonitorSummary, NonFinite
from rankscope.monitor.view import RankInput, rank_rows


def _rank(rank: int, nonfinite: str | None, alerts: tuple[str, ...]) -> RankInput:
    bad = None
    if nonfinite is not None:  # all at step 12: an activation goes bad before a grad_norm
        bad = NonFinite(step=12, t=100.0 - rank, name=nonfinite, value="nan")
    summary = MonitorSummary(
        step=80, step_s=0.05, tokens_per_s=1e4, loss=None, grad_norm=None, wait_s=0.01,
        memory=MemoryUse(), first_nonfinite=bad, alerts=alerts,
    )  # fmt: skip
    return RankInput(rank, "g", "n", "Rank", 100 + rank, "alive", summary)


def test_the_first_rank_to_go_non_finite_leads_the_ranks_its_nan_reached():
    rows = rank_rows(
        [
            _rank(0, "grad_norm", ("first nan grad_norm at step 12", "loss spike", "drift")),
            _rank(1, "activation", ("first nan activation in 0 (output) at step 12",)),
            _rank(2, None, ()),
        ]
    )
    assert [(r.rank, r.cause) for r in rows] == [(1, True), (0, False), (2, False)]


def test_a_dead_rank_still_comes_first():
    dead = _rank(2, None, ())
    dead = RankInput(dead.rank, dead.group, dead.node, dead.role, dead.pid, "dead", None)
    rows = rank_rows([_rank(0, "loss", ("first nan loss at step 12",)), dead])
    assert [r.rank for r in rows] == [2, 0]
