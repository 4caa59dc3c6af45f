"""The job report's HTML template (kept in Python so it installs with the package).

Self-contained: inline CSS and inline SVG, no script, no external resource of any kind.
"""

TEMPLATE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy"
 content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<title>rankscope report: job {{ report.job_id }}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; max-width: 1100px; }
h1 { font-size: 20px; } h2 { font-size: 17px; margin-top: 28px; }
.verdict { font-size: 17px; padding: 10px 14px; border-left: 6px solid; }
.verdict.fail { border-color: #d62728; background: #fdecea; }
.verdict.ok { border-color: #2ca02c; background: #eaf7ea; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
.alert { color: #b00020; font-weight: 600; } .warn { color: #b35900; }
.ok { color: #2e7d32; } .muted { color: #777; }
nav a { margin-right: 12px; }
section.finding h2 { color: #b00020; } section.noted h2 { color: #b35900; }
section.healthy h2::after { content: " \2713"; color: #2e7d32; }
</style>
</head>
<body>
<h1>rankscope report: job {{ report.job_id }}</h1>
<p class="muted">from {{ report.source }}; generated {{ generated }} by rankscope {{ version }}</p>
<p id="verdict" class="verdict {{ 'ok' if report.ok else 'fail' }}">{{ report.verdict }}</p>
<nav>{% for s, _ in sections %}<a href="#section-{{ s.key }}">{{ s.title }}</a>{% endfor %}</nav>
{% for note in report.notes %}<p class="warn">note: {{ note }}</p>{% endfor %}
<section id="section-timeline">
<h2>Timeline</h2>
{% if report.timeline %}
{{ timeline_svg | safe }}
<table>
<tr><th>time</th><th>who</th><th>what</th><th>event</th></tr>
{% for item in loud %}
<tr><td>{{ clock(item.time) }}</td><td>{{ item.who }}</td>
<td class="{{ css_class[item.severity] }}">{{ item.text }}</td><td>{{ item.kind }}</td></tr>
{% else %}
<tr><td colspan="4" class="ok">no warning and no failure among
{{ report.timeline | length }} events</td></tr>
{% endfor %}
</table>
{% else %}
<p class="muted">no events recorded</p>
{% endif %}
</section>
{% for s, charts in sections %}
{% set look = 'healthy' if s.healthy else ('finding' if not s.ok else 'noted') %}
<section id="section-{{ s.key }}" class="{{ look }}">
<h2>{{ s.title }}</h2>
<p>{{ s.summary }}</p>
{% if s.findings %}
<ul>{% for f in s.findings %}<li class="alert">{{ f }}</li>{% endfor %}</ul>
{% endif %}
{% for t in s.tables if t.rows %}
<table>
<tr>{% for c in t.columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for row in t.rows %}<tr>{% for cell in row %}<td>{{ cell }}</td>{% endfor %}</tr>{% endfor %}
</table>
{% if t.omitted %}<p class="muted">{{ t.omitted }}</p>{% endif %}
{% endfor %}
{% for c in charts %}<figure>{{ c | safe }}</figure>{% endfor %}
{% for n in s.notes %}<p class="muted">{{ n }}</p>{% endfor %}
</section>
{% endfor %}
</body>
</html>
"""
