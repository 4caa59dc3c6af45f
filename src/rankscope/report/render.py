"""The job report as one self-contained HTML page, and as a few lines for the terminal.

Charts and the timeline are inline SVG drawn here, not by scripts: the page reads the same with
JavaScript off, from a USB stick, with no network.
"""

from __future__ import annotations

import datetime
import html

from rich.console import Group, RenderableType
from rich.text import Text

from rankscope._version import __version__
from rankscope.report.model import Chart, RunReport, Severity, TimelineItem
from rankscope.units import human_bytes

__all__ = ["render_html", "render_summary", "write_html"]

WIDTH, HEIGHT, PAD = 900, 220, 48
COLOURS = ("#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf")
"""Line colours; red is kept for the ranks the text names (`Series.highlight`)."""
HIGHLIGHT, MUTED = "#d62728", "#9bb7d4"
MARK = {Severity.INFO: "#7f7f7f", Severity.WARN: "#ff7f0e", Severity.FAIL: "#d62728"}


def render_html(report: RunReport) -> str:
    import jinja2

    from rankscope.report._template import TEMPLATE

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    return env.from_string(TEMPLATE).render(
        report=report,
        generated=_clock(report.generated_at, with_date=True),
        version=__version__,
        timeline_svg=timeline_svg(report.timeline),
        sections=[(s, [chart_svg(c) for c in s.charts]) for s in report.sections],
        clock=_clock,
        loud=[i for i in report.timeline if i.severity is not Severity.INFO],
        css_class={Severity.INFO: "muted", Severity.WARN: "warn", Severity.FAIL: "alert"},
    )


def write_html(report: RunReport, path: str) -> str:
    """The page, written whole or not at all; returns its absolute path."""
    from rankscope.files import write_text_atomically

    return write_text_atomically(path, render_html(report))


def render_summary(report: RunReport, path: str | None) -> RenderableType:
    style = "bold green" if report.ok else "bold red"
    lines: list[RenderableType] = [Text(f"job {report.job_id}: {report.verdict}", style=style)]
    for s in report.sections:
        mark = "ok" if s.healthy else ("note" if s.ok else f"{len(s.findings)} finding(s)")
        lines.append(Text(f"  {s.title}: {s.summary} [{mark}]"))
    for note in report.notes:
        lines.append(Text(f"  note: {note}", style="yellow"))
    if path is not None:
        lines.append(Text(f"wrote {path}"))
    return Group(*lines)


def timeline_svg(items: tuple[TimelineItem, ...]) -> str:
    """Every event as a mark on one time axis: failures red, warnings orange, the rest grey."""
    if not items:
        return ""
    t0, t1 = items[0].time, items[-1].time
    span = max(t1 - t0, 1e-6)
    lanes = {Severity.FAIL: 30, Severity.WARN: 55, Severity.INFO: 80}
    marks = []
    for item in items:
        x = PAD + (item.time - t0) / span * (WIDTH - 2 * PAD)
        title = html.escape(f"{_clock(item.time)} {item.who} {item.kind}: {item.text}")
        marks.append(
            f'<circle cx="{x:.1f}" cy="{lanes[item.severity]}" r="5" '
            f'fill="{MARK[item.severity]}"><title>{title}</title></circle>'
        )
    axis = (
        f'<line x1="{PAD}" y1="95" x2="{WIDTH - PAD}" y2="95" stroke="#999"/>'
        f'<text x="{PAD}" y="112" font-size="11">{_clock(t0)}</text>'
        f'<text x="{WIDTH - PAD}" y="112" font-size="11" text-anchor="end">{_clock(t1)}</text>'
    )
    return (
        f'<svg class="timeline" width="{WIDTH}" height="120" role="img" '
        f'aria-label="timeline of {len(items)} events">{axis}{"".join(marks)}</svg>'
    )


def chart_svg(chart: Chart) -> str:
    """Lines over time, one per series, with the y range written at the axis."""
    points = [p for s in chart.series for p in s.points]
    if not points:
        return ""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1, y0, y1 = min(xs), max(xs), min(0.0, min(ys)), max(ys)
    sx = (WIDTH - 2 * PAD) / max(x1 - x0, 1e-9)
    sy = (HEIGHT - 2 * PAD) / max(y1 - y0, 1e-9)
    parts, legend = [], []
    muted = any(s.highlight for s in chart.series)  # the others step back, the named stand out
    ordered = sorted(enumerate(chart.series), key=lambda s: s[1].highlight)  # named drawn last
    for i, series in ordered:
        path = " ".join(
            f"{PAD + (x - x0) * sx:.1f},{HEIGHT - PAD - (y - y0) * sy:.1f}"
            for x, y in series.points
        )
        colour = HIGHLIGHT if series.highlight else (MUTED if muted else COLOURS[i % len(COLOURS)])
        width = 3 if series.highlight else 1.5
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="{width}" points="{path}">'
            f"<title>{html.escape(series.label)}</title></polyline>"
        )
        legend.append(
            f'<text x="{WIDTH - PAD + 4}" y="{PAD + 14 * i}" font-size="11" fill="{colour}">'
            f"{html.escape(series.label[:24])}</text>"
        )
    parts.extend(legend)
    top, bottom = _value(y1, chart.unit), _value(y0, chart.unit)
    if chart.x_unit == "time":
        first, last = _clock(x0), _clock(x1)
    else:
        first, last = f"step {x0:g}", f"step {x1:g}"
    axis = (
        f'<text x="{PAD}" y="18" font-size="13" font-weight="600">{html.escape(chart.title)}</text>'
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" '
        'stroke="#999"/>'
        f'<text x="4" y="{PAD}" font-size="11">{top}</text>'
        f'<text x="4" y="{HEIGHT - PAD}" font-size="11">{bottom}</text>'
        f'<text x="{PAD}" y="{HEIGHT - PAD + 16}" font-size="11">{first}</text>'
        f'<text x="{WIDTH - PAD}" y="{HEIGHT - PAD + 16}" font-size="11" '
        f'text-anchor="end">{last}</text>'
    )
    return (
        f'<svg class="chart" width="{WIDTH + 140}" height="{HEIGHT}" role="img" '
        f'aria-label="{html.escape(chart.title)}">{axis}{"".join(parts)}</svg>'
    )


def _value(v: float, unit: str) -> str:
    return human_bytes(v) if unit == "bytes" else f"{v:.3g}{unit}"


def _clock(t: float, with_date: bool = False) -> str:
    if t <= 0:
        return "?"
    fmt = "%Y-%m-%d %H:%M:%S" if with_date else "%H:%M:%S"
    return datetime.datetime.fromtimestamp(t).strftime(fmt)
