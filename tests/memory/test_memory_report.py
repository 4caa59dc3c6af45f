"""The HTML report: self-contained, and in a real browser (headless Chromium) it runs its script
without errors and draws its charts."""

from __future__ import annotations

import mmap
import re
from pathlib import Path

import rankscope
from helpers.cluster import chromium, page_requests
from rankscope.memory.io_report import ProcessSection, render_report
from rankscope.memory.model import MIB

ONE_MIB = b"\x01" * MIB


def leaking_report(path: str) -> str:
    """A report of a real leak: fresh anonymous pages every step (malloc could hand back
    memory this test process freed earlier, which RSS would not show)."""
    kept: list[mmap.mmap] = []
    profiler = rankscope.MemoryProfiler(label="rank 3 </script><b>")
    for i in range(30):
        buf = mmap.mmap(-1, MIB)
        buf[:] = ONE_MIB
        kept.append(buf)
        profiler.take_snapshot(step=i)
    assert profiler.leak_detected
    return profiler.generate_report(path)


def test_report_is_self_contained(tmp_path):
    path = leaking_report(str(tmp_path / "sub" / "memory.html"))
    html = Path(path).read_text(encoding="utf-8")
    assert "<script src" not in html and "<link" not in html and "@import" not in html
    assert "LEAK" in html and "process RSS leaks 1.0 MiB/step" in html
    assert "rank 3 &lt;/script&gt;&lt;b&gt;" in html  # labels are escaped in the page...
    assert "rank 3 <\\/script><b>" in html  # ...and cannot close the data's script tag


def test_single_snapshot_report_renders():
    snap = rankscope.MemoryProfiler().take_snapshot()
    html = render_report("one", [ProcessSection("pid 1", (snap,))], overview=True)
    assert "no leak test" in html


def test_report_loads_in_chromium_and_draws_its_chart(tmp_path, chromium_present):
    path = leaking_report(str(tmp_path / "memory.html"))
    net_log = str(tmp_path / "net.json")
    result = chromium(f"file://{path}", tmp_path, net_log=net_log)
    assert result.returncode == 0, result.stderr[-2000:]
    assert page_requests(net_log) == []  # offline: its script and data are inline
    console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], "the page logged to its console (script errors?)"
    dom = result.stdout
    body = re.search(r"<body[^>]*>", dom)
    assert body is not None and "data-errors" not in body.group(0)
    drawn = re.search(r'<body[^>]*data-charts-drawn="(\d+)"', dom)
    assert drawn is not None, "the chart script did not finish"
    assert int(drawn.group(1)) >= 2  # process and node charts
    rss_line = re.search(r'<polyline points="([^"]+)"[^>]*data-metric="rss"', dom)
    assert rss_line is not None
    assert len(rss_line.group(1).split()) == 30  # one point per snapshot


def test_chromium_check_catches_a_broken_script(tmp_path, chromium_present):
    """The check above would see a script error: break the data on purpose."""
    path = leaking_report(str(tmp_path / "memory.html"))
    html = Path(path).read_text(encoding="utf-8")
    broken = re.sub(
        r'(<script type="application/json" id="report-data">)\{',
        r"\1{broken",
        html,
    )
    (tmp_path / "broken.html").write_text(broken, encoding="utf-8")
    result = chromium(f"file://{tmp_path / 'broken.html'}", tmp_path)
    assert any("Uncaught" in line for line in result.stderr.splitlines())
    assert re.search(r"<body[^>]*data-charts-drawn", result.stdout) is None
    assert re.search(r"<body[^>]*data-errors=", result.stdout) is not None


def test_report_screenshot_shows_its_chart(tmp_path, chromium_present):
    """The page as a user sees it: a 1200x1400 PNG with ink and the chart's coloured lines."""
    from PIL import Image

    path = leaking_report(str(tmp_path / "memory.html"))
    shot = str(tmp_path / "memory-report-screenshot.png")  # kept beside the report
    taken = chromium(f"file://{path}", tmp_path, screenshot=shot)
    assert taken.returncode == 0, taken.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 1400)
    pixels = list(image.getdata())
    inked = sum(1 for p in pixels if sum(p) < 600) / len(pixels)
    coloured = sum(1 for r, g, b in pixels if max(r, g, b) - min(r, g, b) > 80)
    assert inked > 0.01, "the page looks blank"
    assert coloured > 200, "no chart line drawn"
