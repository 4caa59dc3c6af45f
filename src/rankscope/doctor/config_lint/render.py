"""The lint report as a table, one rule per row, and as HTML in the doctor's style."""

from __future__ import annotations

import json
import time

from rich.table import Table
from rich.text import Text

from rankscope._version import __version__
from rankscope.doctor.config_lint.model import LintReport
from rankscope.doctor.preflight.render import STYLES
from rankscope.serialize import plain

__all__ = ["render_html", "render_lint"]


def render_lint(report: LintReport) -> Table:
    failed = sum(r.status.value == "fail" for r in report.rules)
    title = f"rankscope doctor --config {report.config}: {len(report.rules)} rules, {failed} failed"
    if report.model is not None:
        title += f"; model {report.model.params / 1e9:.2f} B parameters"
    table = Table(title=title, title_justify="left", show_lines=True)
    table.add_column("rule")
    table.add_column("status")
    table.add_column("finding")
    for r in report.rules:
        body = Text(r.message)
        if r.keys and r.status.value in ("fail", "warn"):
            body.append("\n  keys: ", style="dim")
            body.append(", ".join(f"{k}={v}" for k, v in r.keys.items()))
        if r.fix:
            body.append("\n  fix: ", style="bold")
            body.append(" ".join(f"{k}={v}" for k, v in r.fix.items()))
        table.add_row(r.rule, Text(r.status.value, style=STYLES[r.status]), body)
    return table


_TEMPLATE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
.fail { color: #b00020; font-weight: 600; } .warn { color: #b26a00; font-weight: 600; }
.ok { color: #2e7d32; } .skip, .muted { color: #777; }
code { background: #f4f4f4; padding: 0 3px; }
</style></head><body>
<h1>{{ title }}</h1>
<p class="muted">generated {{ generated }} by rankscope {{ version }}</p>
<table><tr><th>rule</th><th>status</th><th>finding</th><th>keys</th><th>fix</th></tr>
{% for r in report.rules %}<tr><td>{{ r.rule }}</td>
<td class="{{ r.status.value }}">{{ r.status.value }}</td><td>{{ r.message }}</td>
<td>{% for k, v in r.keys.items() %}<code>{{ k }}={{ v }}</code> {% endfor %}</td>
<td>{% for k, v in r.fix.items() %}<code>{{ k }}={{ v }}</code> {% endfor %}</td></tr>
{% endfor %}</table>
<script type="application/json" id="report-data">{{ data_json | safe }}</script>
</body></html>
"""


def render_html(report: LintReport) -> str:
    import jinja2

    env = jinja2.Environment(autoescape=True)
    return env.from_string(_TEMPLATE).render(
        title=f"rankscope doctor --config {report.config}",
        generated=time.strftime("%Y-%m-%d %H:%M:%S"),
        version=__version__,
        report=report,
        data_json=json.dumps(plain(report)).replace("</", "<\\/"),
    )
