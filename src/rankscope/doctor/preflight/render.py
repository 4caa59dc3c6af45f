"""The preflight report as a text table grouped by check, and as one self-contained HTML file
(the memory report's style: inline CSS, the data inline as JSON, no network)."""

from __future__ import annotations

import json
import time

from rich.table import Table
from rich.text import Text

from rankscope._version import __version__
from rankscope.doctor.preflight.model import PreflightReport, Status
from rankscope.serialize import plain

__all__ = ["STYLES", "render_html", "render_preflight"]

STYLES = {
    Status.OK: "green",
    Status.WARN: "yellow",
    Status.FAIL: "bold red",
    Status.SKIP: "dim",
}


def render_preflight(report: PreflightReport) -> Table:
    """One group of rows per check: verdict and summary, the evidence per node, the fix."""
    counts = {s: sum(c.status == s for c in report.checks) for s in Status}
    title = f"rankscope doctor: {len(report.nodes)} nodes, " + ", ".join(
        f"{n} {s.value}" for s, n in counts.items() if n
    )
    if report.cluster.runtime_env:
        title += f" (in the environment of {report.cluster.runtime_env})"
    table = Table(title=title, title_justify="left", show_header=True, show_lines=True)
    table.add_column("check")
    table.add_column("status")
    table.add_column("evidence and fix")
    for check in report.checks:
        body = Text(check.summary)
        for where, what in check.evidence.items():
            body.append(f"\n  {where}: ", style="dim")
            body.append(what)
        if check.fix:
            body.append("\n  fix: ", style="bold")
            body.append(check.fix)
        table.add_row(check.name, Text(check.status.value, style=STYLES[check.status]), body)
    if report.unanswered:
        table.add_row(
            "nodes", Text("fail", style=STYLES[Status.FAIL]), "\n".join(report.unanswered)
        )
    return table


_TEMPLATE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{ title }}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 17px; margin-top: 32px; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
.fail { color: #b00020; font-weight: 600; } .warn { color: #b26a00; font-weight: 600; }
.ok { color: #2e7d32; } .skip, .muted { color: #777; }
code { background: #f4f4f4; padding: 0 3px; }
</style>
</head>
<body>
<h1>{{ title }}</h1>
<p class="muted">generated {{ generated }} by rankscope {{ version }}; cluster
<code>{{ report.cluster.address }}</code></p>
{% for c in report.checks %}
<h2>{{ c.name }}: <span class="{{ c.status.value }}">{{ c.status.value }}</span></h2>
<p>{{ c.summary }}</p>
{% if c.evidence %}<table><tr><th>where</th><th>evidence</th></tr>
{% for k, v in c.evidence.items() %}<tr><td>{{ k }}</td><td>{{ v }}</td></tr>{% endfor %}
</table>{% endif %}
{% if c.fix %}<p><b>fix:</b> {{ c.fix }}</p>{% endif %}
{% endfor %}
{% if report.unanswered %}<h2>nodes: <span class="fail">fail</span></h2>
<ul>{% for u in report.unanswered %}<li>{{ u }}</li>{% endfor %}</ul>{% endif %}
<script type="application/json" id="report-data">{{ data_json | safe }}</script>
</body>
</html>
"""


def render_html(report: PreflightReport) -> str:
    """The report as one HTML page; the same dataclasses `--json` prints are inlined."""
    import jinja2

    env = jinja2.Environment(autoescape=True)
    data = json.dumps(plain(report)).replace("</", "<\\/")
    return env.from_string(_TEMPLATE).render(
        title=f"rankscope doctor: {len(report.nodes)} nodes",
        generated=time.strftime("%Y-%m-%d %H:%M:%S"),
        version=__version__,
        report=report,
        data_json=data,
    )
