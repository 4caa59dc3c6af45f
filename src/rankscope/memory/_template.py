"""The memory report's HTML template (kept in Python so it installs with the package).

Self-contained: inline CSS, data as inline JSON, charts drawn into inline SVG by inline
JavaScript. No network access, no external scripts or fonts.
"""

TEMPLATE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{ title }}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 17px; margin-top: 32px; } h3 { font-size: 14px; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.leak, .alert { color: #b00020; font-weight: 600; }
.ok { color: #2e7d32; }
.muted { color: #777; }
.chart { border: 1px solid #ddd; margin: 6px 12px 6px 0; background: #fff; }
.charts { display: flex; flex-wrap: wrap; }
code { background: #f4f4f4; padding: 0 3px; }
</style>
</head>
<body>
<h1>{{ title }}</h1>
<p class="muted">generated {{ generated }} by rankscope {{ version }}</p>
{% if overview %}
<h2>Ranks</h2>
<table>
<tr><th>process</th><th>node</th><th>pid</th><th>RSS</th><th>node used</th>
<th>CUDA allocated</th><th>reserved</th><th>device used</th><th>verdicts</th></tr>
{% for row in overview %}
<tr><td>{{ row.label }}</td><td>{{ row.node }}</td><td class="num">{{ row.pid }}</td>
<td class="num">{{ row.rss }}</td><td class="num">{{ row.node_used }}</td>
<td class="num">{{ row.allocated }}</td><td class="num">{{ row.reserved }}</td>
<td class="num">{{ row.device_used }}</td>
<td>{% for v in row.verdicts %}<span class="alert">{{ v }}</span>
{% else %}<span class="ok">ok</span>{% endfor %}</td></tr>
{% endfor %}
</table>
{% endif %}
{% for s in sections %}
<section id="section-{{ loop.index0 }}">
<h2>{{ s.label }}</h2>
<p>{{ s.summary }}</p>
{% if s.note %}<p class="muted">{{ s.note }}</p>{% endif %}
<h3>Leak test</h3>
<table>
<tr><th>metric</th><th>verdict</th><th>growth/step</th><th>growth/s</th>
<th>time to full</th><th>why</th></tr>
{% for f in s.leaks %}
<tr><td>{{ f.title }}</td>
<td class="{{ 'leak' if f.leak else 'ok' }}">{{ 'LEAK' if f.leak else 'no leak' }}</td>
<td class="num">{{ f.per_step }}</td><td class="num">{{ f.per_second }}</td>
<td class="num">{{ f.to_full }}</td><td>{{ f.reason }}</td></tr>
{% else %}
<tr><td colspan="6" class="muted">no snapshot history</td></tr>
{% endfor %}
</table>
<h3>Fragmentation and usage</h3>
{% if s.findings %}
<ul>{% for f in s.findings %}<li><span class="alert">{{ f.verdict }}</span>: {{ f.message }}.
<span class="muted">{{ f.advice }}</span></li>{% endfor %}</ul>
{% else %}<p class="ok">no fragmentation, no memory outside PyTorch above the thresholds,
no alert</p>{% endif %}
{% if s.suspects %}
<h3>Suspects (fastest-growing allocation sites)</h3>
<table>
<tr><th>where</th><th>growth</th><th>blocks</th><th>line</th></tr>
{% for a in s.suspects %}
<tr><td><code>{{ a.location }}</code></td><td class="num">{{ a.size_diff }}</td>
<td class="num">{{ a.count_diff }}</td><td><code>{{ a.line }}</code></td></tr>
{% endfor %}
</table>
{% endif %}
<h3>Timeline</h3>
<div class="charts" id="charts-{{ loop.index0 }}"></div>
</section>
{% endfor %}
<script type="application/json" id="report-data">{{ data_json | safe }}</script>
<script>
"use strict";
window.__reportErrors = [];
window.addEventListener("error", function (e) {
  window.__reportErrors.push(String(e.message));
  document.body.setAttribute("data-errors", window.__reportErrors.join(" | "));
});
(function () {
  var NS = "http://www.w3.org/2000/svg";
  var COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"];
  var W = 560, H = 270, L = 70, R = 12, B = 36;
  var data = JSON.parse(document.getElementById("report-data").textContent);

  function el(name, attrs, text) {
    var node = document.createElementNS(NS, name);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) { node.textContent = text; }
    return node;
  }
  function fmtBytes(v) {
    var units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0, a = Math.abs(v);
    while (a >= 1024 && i < units.length - 1) { a /= 1024; v /= 1024; i++; }
    return (i === 0 ? v.toFixed(0) : v.toFixed(1)) + " " + units[i];
  }
  function chart(group, xs, xlabel) {
    var ys = [];
    group.series.forEach(function (s) {
      s.values.forEach(function (v) { if (v !== null) { ys.push(v); } });
    });
    if (ys.length === 0 || xs.length === 0) { return null; }
    var T = 30 + 12 * Math.ceil(group.series.length / 3);
    var xmin = Math.min.apply(null, xs), xmax = Math.max.apply(null, xs);
    var ymin = Math.min.apply(null, ys), ymax = Math.max.apply(null, ys);
    if (xmax === xmin) { xmax = xmin + 1; }
    var span = Math.max(ymax - ymin, Math.abs(ymax) * 0.02, 1), mid = (ymax + ymin) / 2;
    if (ymax - ymin < span) { ymin = mid - span / 2; ymax = mid + span / 2; }
    var pad = (ymax - ymin) * 0.05; ymin = Math.max(0, ymin - pad); ymax += pad;
    function px(x) { return L + (x - xmin) / (xmax - xmin) * (W - L - R); }
    function py(y) { return H - B - (y - ymin) / (ymax - ymin) * (H - T - B); }
    var svg = el("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H,
                         "class": "chart", role: "img", "aria-label": group.title});
    svg.appendChild(el("text", {x: L, y: 16, "font-size": 13, "font-weight": "bold"}, group.title));
    for (var k = 0; k <= 4; k++) {
      var yv = ymin + (ymax - ymin) * k / 4, yy = py(yv);
      svg.appendChild(el("line", {x1: L, x2: W - R, y1: yy, y2: yy, stroke: "#eee"}));
      svg.appendChild(el("text", {x: L - 4, y: yy + 4, "font-size": 10, "text-anchor": "end"},
                         fmtBytes(yv)));
    }
    [xmin, (xmin + xmax) / 2, xmax].forEach(function (xv) {
      svg.appendChild(el("text", {x: px(xv), y: H - B + 14, "font-size": 10,
                                  "text-anchor": "middle"}, String(Math.round(xv * 10) / 10)));
    });
    svg.appendChild(el("text", {x: (W + L) / 2, y: H - 6, "font-size": 11,
                                "text-anchor": "middle"}, xlabel));
    svg.appendChild(el("line", {x1: L, x2: L, y1: T, y2: H - B, stroke: "#999"}));
    svg.appendChild(el("line", {x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#999"}));
    var drawn = 0;
    group.series.forEach(function (s, i) {
      var pts = [];
      s.values.forEach(function (v, j) {
        if (v !== null) { pts.push(px(xs[j]).toFixed(1) + "," + py(v).toFixed(1)); }
      });
      if (pts.length === 0) { return; }
      var color = COLORS[i % COLORS.length];
      if (pts.length === 1) {
        var xy = pts[0].split(",");
        svg.appendChild(el("circle", {cx: xy[0], cy: xy[1], r: 3, fill: color,
                                      "class": "series", "data-metric": s.metric}));
      }
      var line = el("polyline", {points: pts.join(" "), fill: "none", stroke: color,
                                 "stroke-width": 1.8, "class": "series",
                                 "data-metric": s.metric});
      line.appendChild(el("title", {}, s.title));
      svg.appendChild(line);
      svg.appendChild(el("text", {x: L + 150 * (i % 3), y: 32 + 12 * Math.floor(i / 3),
                                  "font-size": 10, fill: color}, s.title));
      drawn++;
    });
    svg.setAttribute("data-series-drawn", String(drawn));
    return drawn > 0 ? svg : null;
  }
  var total = 0;
  data.sections.forEach(function (section, i) {
    var holder = document.getElementById("charts-" + i);
    section.groups.forEach(function (group) {
      var svg = chart(group, section.x, section.xlabel);
      if (svg) { holder.appendChild(svg); total++; }
    });
    if (!holder.firstChild) {
      var p = document.createElement("p");
      p.className = "muted"; p.textContent = "no timeline (a single snapshot)";
      holder.appendChild(p);
    }
  });
  document.body.setAttribute("data-charts-drawn", String(total));
})();
</script>
</body>
</html>
"""
