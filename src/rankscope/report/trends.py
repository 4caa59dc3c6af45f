"""Loss and throughput per rank over steps in the job report, from the monitor's series (pure).

Every rank keeps its last steps (`rankscope.step(loss=..., tokens=...)`, the monitor's bounded
series); the report asks for them while the job is live. The ranks the monitor's findings name
(a loss that diverges, spikes or disagrees with the other ranks', a straggler, a throughput that
drifted) are drawn in red and named in the text. After the job ended, the whole run's series
come from the run directory (`steps-*.json`, every Nth step, see `report.collect_steps`);
without those, the steps/s chart comes from the step markers of the run's newest trace, and its
stragglers are the ranks named.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rankscope.monitor.model import RankSeries
from rankscope.report.layout import MAX_POINTS, MAX_SERIES
from rankscope.report.model import Chart, RunData, Section, Series

__all__ = ["findings_over", "monitor_data", "odd_ones", "trends_section"]

LOSS_KINDS = frozenset(
    ("loss_spike", "loss_oscillation", "loss_divergence", "loss_disagreement", "non_finite")
)
"""The monitor's findings that name a rank on the loss chart; RATE_KINDS on the throughput's."""
RATE_KINDS = frozenset(("straggler", "throughput_drift"))
MAX_NAMED = 4
"""Ranks drawn apart in red at most (beside min/median/max when there are many ranks)."""
LIVE = "the last steps each rank keeps, live"
SCREENED = 32
"""Ranks whose whole series the monitor's per-rank detectors read, past 64 ranks."""
SMOOTH = 5
"""Throughput is drawn as the running median of this many steps (one step's rate is noisy)."""


def monitor_data(
    ranks: Sequence[RankSeries],
) -> tuple[tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]]:
    """The ranks' series as the report keeps them, and the monitor's findings over them (the
    same as `rankscope monitor`'s; past `2 x SCREENED` ranks, see `odd_ones`)."""
    kept = [s for s in ranks if s.samples or s.first_nonfinite]
    rows = [
        [[x.step, x.t, _float(x.loss), _float(x.tokens), _float(x.grad_norm)] for x in s.samples]
        for s in kept
    ]
    data = tuple(
        {"rank": s.rank, "group": s.group, "samples": r} for s, r in zip(kept, rows, strict=True)
    )
    # ranks that mark no steps (verl's workers, a Ray Train loop left unchanged) chart nothing,
    # but their collectives still show a straggler
    unstepped = [s for s in ranks if not (s.samples or s.first_nonfinite) and s.collectives]
    whole = odd_ones([_table(r) for r in rows]) if len(kept) > 2 * SCREENED else None
    return data, findings_over([*kept, *unstepped], whole)  # `whole` indexes `kept`


def findings_over(
    series: Sequence[RankSeries], whole: set[int] | None
) -> tuple[dict[str, Any], ...]:
    """The monitor's findings; the per-rank detectors over the series at the indexes `whole`
    only (None: all), the cross-rank tests over every rank."""
    from rankscope.monitor.analysis import analyze
    from rankscope.serialize import plain

    if whole is None:
        return ({"findings": plain(analyze(series))},)
    chosen = {id(series[i]) for i in whole}
    return ({"findings": plain(analyze(series, per_rank=lambda s: id(s) in chosen))},)


def odd_ones(tables: Sequence[np.ndarray]) -> set[int]:
    """The ranks (indexes of `tables`: [[step, time, loss, tokens, grad_norm]]) whose series
    the monitor's per-rank detectors (spikes, oscillation, divergence, drift: ~8 ms a rank of
    128 points, 30 s at 4,096 ranks) read: the `SCREENED` whose loss, and the `SCREENED / 2`
    whose seconds per step, are farthest from the median rank's (relative, at any step). A
    rank close to the median everywhere shows what the median rank shows; the cross-rank tests
    (loss disagreement, stragglers) still read every rank."""
    chosen: set[int] = set()
    for column, count in ((2, SCREENED), (-1, SCREENED // 2)):
        curves = {}
        for i, a in enumerate(tables):
            if len(a) < 2:
                continue
            if column == -1:  # seconds per step
                y = np.diff(a[:, 1]) / np.maximum(np.diff(a[:, 0]), 1)
                xy = np.column_stack([a[1:, 0], y])
            else:
                xy = a[:, [0, column]]
            xy = xy[np.isfinite(xy[:, 1])]
            if len(xy) >= 2:
                curves[i] = xy
        if len(curves) < 3:
            continue
        grid = np.unique(np.concatenate([xy[:, 0] for xy in curves.values()]))
        if len(grid) > MAX_POINTS:
            grid = grid[np.unique(np.linspace(0, len(grid) - 1, MAX_POINTS).astype(int))]
        values = _on_grid(grid, [(xy[:, 0], xy[:, 1]) for xy in curves.values()])
        mid = np.median(values, axis=0)
        far = np.max(np.abs(values - mid) / np.maximum(np.abs(mid), 1e-12), axis=1)
        keys = list(curves)
        chosen.update(keys[j] for j in np.argsort(-far)[:count])
    return chosen


def trends_section(data: RunData, now: float) -> Section | None:
    """Loss and steps/s (or tokens/s) of every rank over steps; the odd ranks in red. From the
    live series, else from the step markers of the run's newest trace (steps/s only)."""
    rows, source = _rows(data)
    if not rows:
        return None
    from_steps = bool(data.series)  # live, or the run directory's whole-run series
    named = _named(data.health) if from_steps else _trace_named(data)
    tables = {label: _table(r) for label, r in rows.items()}
    pairs = sum(max(0, len(a) - 1) for a in tables.values())
    with_tokens = sum(int(np.isfinite(a[1:, 3]).sum()) for a in tables.values())
    unit = "tokens/s" if pairs and with_tokens * 2 >= pairs else "steps/s"
    loss: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    norm: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    raw: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for label, a in tables.items():
        finite = np.isfinite(a[:, 2])
        if finite.any():
            loss[label] = (a[finite, 0], a[finite, 2])
        finite = np.isfinite(a[:, 4])
        if finite.any():
            norm[label] = (a[finite, 0], a[finite, 4])
        steps, rates = _rates(a, unit)
        if len(steps):
            raw[label] = (steps, rates)
    smooth = _running_medians([rates for _, rates in raw.values()])
    rate = {label: (xy[0], m) for (label, xy), m in zip(raw.items(), smooth, strict=True)}
    charts = []
    if loss:
        charts.append(Chart("loss per rank over steps", "", _lines(loss, named["loss"]), "step"))
    if rate:
        title = f"{unit} per rank over steps (running median of {SMOOTH} steps)"
        charts.append(Chart(title, "", _lines(rate, named["rate"]), "step"))
    if norm:
        charts.append(Chart("grad norm per rank over steps", "", _lines(norm, set()), "step"))
    if not charts:
        return None
    first = min(float(a[0, 0]) for a in tables.values() if len(a))
    last = max(float(a[-1, 0]) for a in tables.values() if len(a))
    summary = f"{len(tables)} ranks, steps {first:g}-{last:g} ({source})"
    notes = [
        f"{who} stands out ({kind.replace('_', ' ')}): {evidence}; drawn in red"
        for who, kind, evidence in named["text"]
    ]
    if not loss:
        notes.append(
            "no loss: pass it as rankscope.step(loss=...) to chart it"
            if from_steps
            else "no loss: traces keep step markers only; the loss needs the live job"
        )
    if not named["text"]:
        notes.append("no rank stands out: no loss or throughput outlier was found")
    notes = notes[: MAX_NAMED + 1]
    return Section("trends", "Loss and throughput", (), summary, (), tuple(charts), tuple(notes))


def _table(rows: list[Any]) -> np.ndarray:
    """[[step, time, loss, tokens, grad_norm]] (grad_norm NaN where older data has 4 columns)."""
    a = np.asarray(rows, dtype=float)
    a = a.reshape(len(rows), -1) if len(rows) else np.empty((0, 5))
    if a.shape[1] < 4:
        raise ValueError(f"a step row of {a.shape[1]} numbers (4 or 5 expected)")
    if a.shape[1] < 5:
        a = np.hstack([a, np.full((len(a), 5 - a.shape[1]), np.nan)])
    return a


def _rows(data: RunData) -> tuple[dict[str, list[Any]], str]:
    """Per rank, [[step, time, loss, tokens, grad_norm]] and where they come from."""
    steps = {
        f"rank {r['rank']}": r["samples"]
        for r in sorted(data.series, key=lambda r: r.get("rank", -1))
        if r.get("samples")
    }
    if steps:
        return steps, data.series_from or LIVE
    for trace in reversed(data.traces):
        ranks = (trace.get("digest") or {}).get("ranks") or ()
        marks = {
            r["who"]: [[step, t, None, None, None] for step, t in r.get("step_times") or ()]
            for r in ranks
            if len(r.get("step_times") or ()) >= 2
        }
        if marks:
            return marks, f"step markers of {trace['name']}"
    return {}, ""


def _rates(a: np.ndarray, unit: str) -> tuple[np.ndarray, np.ndarray]:
    """Per step: tokens/s, or steps/s (steps between two samples over their time), as
    `monitor.analysis.throughput` counts them."""
    dt = np.diff(a[:, 1])
    if unit == "tokens/s":
        work = a[1:, 3]
        keep = (dt > 0) & np.isfinite(work)
    else:
        work = np.diff(a[:, 0])
        keep = dt > 0
    steps, rates = a[1:, 0][keep], work[keep] / dt[keep]
    finite = np.isfinite(rates)
    return steps[finite], rates[finite]


def _running_medians(curves: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Each curve's running median: the median of each value with the SMOOTH - 1 before it
    (fewer at the start). Curves of one length go through numpy together: 4,096 ranks make a
    few calls, not 4,096."""
    out: list[np.ndarray] = [np.empty(0)] * len(curves)
    by_length: dict[int, list[int]] = {}
    for i, values in enumerate(curves):
        by_length.setdefault(len(values), []).append(i)
    for length, indexes in by_length.items():
        block = np.vstack([curves[i] for i in indexes]).reshape(len(indexes), length)
        smooth = np.empty_like(block)
        for j in range(min(length, SMOOTH - 1)):
            smooth[:, j] = np.median(block[:, : j + 1], axis=1)
        if length >= SMOOTH:
            windows = np.lib.stride_tricks.sliding_window_view(block, SMOOTH, axis=1)
            smooth[:, SMOOTH - 1 :] = np.sort(windows, axis=2)[:, :, SMOOTH // 2]  # odd SMOOTH
        for row, i in enumerate(indexes):
            out[i] = smooth[row]
    return out


def _points(x: np.ndarray, y: np.ndarray) -> list[tuple[float, float]]:
    """At most MAX_POINTS points, evenly thinned, the last kept."""
    if len(x) > MAX_POINTS:
        keep = np.unique(np.linspace(0, len(x) - 1, MAX_POINTS).astype(int))
        x, y = x[keep], y[keep]
    return list(zip(x.tolist(), y.tolist(), strict=True))


def _trace_named(data: RunData) -> dict[str, Any]:
    """The stragglers of the newest trace, on the throughput chart."""
    out: dict[str, Any] = {"loss": set(), "rate": set(), "text": []}
    for trace in reversed(data.traces):
        found = (trace.get("digest") or {}).get("stragglers")
        if found:
            for s in found[:MAX_NAMED]:
                out["rate"].add(f"rank {s['rank']}")
                out["text"].append((f"rank {s['rank']}", "straggler", s["why"]))
            break
    return out


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
    lines: Mapping[str, tuple[np.ndarray, np.ndarray]], named: set[str]
) -> tuple[Series, ...]:
    """One line per rank, the named in red; past MAX_SERIES ranks, the min/median/max of the
    others (as `layout.series`) and the named ranks apart."""
    if len(lines) <= MAX_SERIES:
        return tuple(Series(k, tuple(_points(*xy)), k in named) for k, xy in lines.items())
    apart = [k for k in lines if k in named][:MAX_NAMED]
    rest = [xy for k, xy in lines.items() if k not in apart]
    grid = np.unique(np.concatenate([x for x, _ in rest]))
    if len(grid) > MAX_POINTS:
        grid = grid[np.unique(np.linspace(0, len(grid) - 1, MAX_POINTS).astype(int))]
    values = _on_grid(grid, rest)
    spread = (
        ("min", values.min(axis=0)),
        ("median", np.median(values, axis=0)),
        ("max", values.max(axis=0)),
    )
    return (
        *(Series(f"{name} over {len(rest)} ranks", tuple(_points(grid, v))) for name, v in spread),
        *(Series(k, tuple(_points(*lines[k])), True) for k in apart),
    )


def _on_grid(grid: np.ndarray, lines: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Each line's y at the grid's x, one row a line; lines sampled at the grid's own steps
    (every rank at the same steps: the usual case) are taken as they are, not interpolated."""
    return np.vstack(
        [
            y if len(x) == len(grid) and np.array_equal(x, grid) else np.interp(grid, x, y)
            for x, y in lines
        ]
    )


def _float(value: float | None) -> float:
    return math.nan if value is None else value
