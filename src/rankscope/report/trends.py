"""Loss and throughput per rank over steps in the job report, from the monitor's series (pure).

Every rank keeps its last steps (`rankscope.step(loss=..., tokens=...)`, the monitor's bounded
series); the report asks for them while the job is live. The ranks the monitor's findings name
(a loss that diverges, spikes or disagrees with the other ranks', a straggler, a throughput that
drifted) are drawn in red and named in the text.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from rankscope.monitor.model import RankSeries, StepSample
from rankscope.report.layout import MAX_SERIES, series, thin
from rankscope.report.model import Chart, RunData, Section, Series

__all__ = ["monitor_data", "trends_section"]

LOSS_KINDS = frozenset(
    ("loss_spike", "loss_oscillation", "loss_divergence", "loss_disagreement", "non_finite")
)
"""The monitor's findings that name a rank on the loss chart; RATE_KINDS on the throughput's."""
RATE_KINDS = frozenset(("straggler", "throughput_drift"))
MAX_NAMED = 4
"""Ranks drawn apart in red at most (beside min/median/max when there are many ranks)."""
SMOOTH = 5
"""Throughput is drawn as the running median of this many steps (one step's rate is noisy)."""


def monitor_data(
    ranks: Sequence[RankSeries],
) -> tuple[tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]]:
    """The ranks' series as the report keeps them, and the monitor's findings over them (the
    same as `rankscope monitor`'s)."""
    from rankscope.monitor.analysis import analyze
    from rankscope.serialize import plain

    kept = [s for s in ranks if s.samples or s.first_nonfinite]
    data = tuple(
        {
            "rank": s.rank,
            "group": s.group,
            "samples": [[x.step, x.t, x.loss, x.tokens] for x in s.samples],
        }
        for s in kept
    )
    return data, ({"findings": plain(analyze(kept))},)


def trends_section(data: RunData, now: float) -> Section | None:
    """Loss and steps/s (or tokens/s) of every rank over steps; the odd ranks in red."""
    if not any(r.get("samples") for r in data.series):
        return None
    named = _named(data.health)
    loss: dict[str, list[tuple[float, float]]] = {}
    rate: dict[str, list[tuple[float, float]]] = {}
    unit = "steps/s"
    for r in sorted(data.series, key=lambda r: r.get("rank", -1)):
        label = f"rank {r['rank']}"
        samples = [StepSample(*row) for row in r.get("samples") or ()]
        points = [(float(s.step), s.loss) for s in samples if _finite(s.loss)]
        if points:
            loss[label] = points  # type: ignore[assignment]
        steps, rates, unit = _throughput(samples)
        if steps:
            rate[label] = list(zip(map(float, steps), _running_median(rates), strict=True))
    charts = []
    if loss:
        charts.append(Chart("loss per rank over steps", "", _lines(loss, named["loss"]), "step"))
    if rate:
        title = f"{unit} per rank over steps (running median of {SMOOTH} steps)"
        charts.append(Chart(title, "", _lines(rate, named["rate"]), "step"))
    if not charts:
        return None
    steps_seen = [row[0] for r in data.series for row in r.get("samples") or ()]
    summary = (
        f"{len(data.series)} ranks, steps {min(steps_seen)}-{max(steps_seen)} "
        f"(the last steps each rank keeps, live)"
    )
    notes = [
        f"{who} stands out ({kind.replace('_', ' ')}): {evidence}; drawn in red"
        for who, kind, evidence in named["text"]
    ]
    if not loss:
        notes.append("no loss: pass it as rankscope.step(loss=...) to chart it")
    if not named["text"]:
        notes.append("no rank stands out: the monitor found no loss or throughput outlier")
    notes = notes[: MAX_NAMED + 1]
    return Section("trends", "Loss and throughput", (), summary, (), tuple(charts), tuple(notes))


def _named(health: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ranks the monitor's findings name, per chart, and one line each for the text."""
    out: dict[str, Any] = {"loss": set(), "rate": set(), "text": []}
    for f in (f for h in health for f in h.get("findings", ())):
        kind = str(f.get("kind"))
        chart = "loss" if kind in LOSS_KINDS else "rate" if kind in RATE_KINDS else None
        if chart is None:
            continue
        for rank in f.get("ranks") or ():
            out[chart].add(f"rank {rank}")
            if len(out["text"]) < MAX_NAMED:
                out["text"].append((f"rank {rank}", kind, str(f.get("evidence", ""))))
    return out


def _lines(
    lines: Mapping[str, Sequence[tuple[float, float]]], named: set[str]
) -> tuple[Series, ...]:
    """One line per rank, the named in red; past MAX_SERIES ranks, the min/median/max of the
    others and the named ranks apart."""
    if len(lines) <= MAX_SERIES:
        return tuple(Series(k, thin(v), k in named) for k, v in lines.items())
    apart = [k for k in lines if k in named][:MAX_NAMED]
    rest = {k: v for k, v in lines.items() if k not in apart}
    return (*series(rest), *(Series(k, thin(lines[k]), True) for k in apart))


def _throughput(samples: Sequence[StepSample]) -> tuple[list[int], list[float], str]:
    from rankscope.monitor.analysis import throughput

    return throughput(samples)


def _running_median(values: Sequence[float]) -> list[float]:
    return [statistics.median(values[max(0, i - SMOOTH + 1) : i + 1]) for i in range(len(values))]


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)
