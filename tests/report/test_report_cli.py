"""`rankscope report` on run directories as the hub writes them, and the page in Chromium."""

from __future__ import annotations

import json
import os
import re

from PIL import Image
from typer.testing import CliRunner

import rankscope.cli.main as cli
from helpers.cluster import chromium, page_requests
from rankscope.runtime.protocol import Event
from rankscope.runtime.run_dir import append_events, write_atomically

NOW = 1_796_300_000.0
HANG = (
    "group 0 (4 ranks): ranks 0-2 wait in all_reduce #21 (float32[64,32]) for 6.8 s; "
    "rank 3 never entered #21, its last completed collective is #20; "
    "rank 3 is in wait_for_rollout_weights fault_hang.py:25"
)


def _hung_run(run_dir: str) -> str:
    """A job's run directory the way the hub leaves it after the watchdog fired."""
    contexts = [{"rank": r, "pid": 100 + r, "hostname": "n1"} for r in range(4)]
    batch = [
        ("job7", f"p{r}", Event("probe.registered", NOW + r, {"context": contexts[r]}))
        for r in range(4)
    ]
    path = write_atomically(run_dir, "job7", "hang-report-1.json", json.dumps({"reason": "x"}))
    report = Event("hang_report", NOW + 60, {"path": path, "reason": "5 s", "findings": [HANG]})
    append_events(run_dir, [*batch, ("job7", "p1", report)])
    tracks = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": r, "args": {"name": f"rank {r}"}}
              for r in range(4)]  # fmt: skip
    marks = [{"ph": "i", "name": f"step {i}", "pid": 1, "tid": r, "ts": i * 1e5}
             for r in range(4) for i in range(3)]  # fmt: skip
    trace = json.dumps({"traceEvents": [*tracks, *marks]})  # enable_detailed_tracing()'s file
    write_atomically(run_dir, "job7", "trace-20261203-140000.json", trace)
    shm = {"name": "/dev/shm", "status": "warn", "summary": "small", "evidence": {"n1": "1 GiB"}}
    doctor = {"command": "doctor", "data": {"nodes": [], "checks": [shm]}}
    write_atomically(run_dir, "job7", "doctor.json", json.dumps(doctor))  # `doctor --json`
    return os.path.join(run_dir, "job7")


def _report(*args: str):
    return CliRunner().invoke(cli.app, ["report", *args])


def test_a_hung_runs_page_names_the_rank_that_never_came(tmp_path):
    job_dir = _hung_run(str(tmp_path / "runs"))
    page = tmp_path / "page.html"
    result = _report(job_dir, "-o", str(page))
    assert result.exit_code == 1, result.output  # a finding
    assert f"job job7: {HANG}" in " ".join(result.output.split())
    html = page.read_text()
    assert re.search(r'<p id="verdict" class="verdict fail">group 0 \(4 ranks\)', html)
    assert "rank 3 never entered #21" in html

    as_json = _report(str(tmp_path / "runs"), "--job", "job7", "--json")
    data = json.loads(as_json.output)["data"]
    assert data["verdict"] == HANG
    rows = next(s for s in data["sections"] if s["key"] == "ranks")["tables"][0]["rows"]
    assert [r[0] for r in rows] == ["rank 0", "rank 1", "rank 2", "rank 3"]


def test_an_empty_run_directory_is_a_page_that_says_so(tmp_path):
    (tmp_path / "runs").mkdir()
    page = tmp_path / "page.html"
    result = _report(str(tmp_path / "runs"), "-o", str(page))
    assert result.exit_code == 0, result.output
    assert "nothing recorded" in page.read_text()


def test_a_path_that_is_not_a_run_directory_is_one_line_and_writes_nothing(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    page = tmp_path / "page.html"
    for path in (tmp_path / "notes.txt", tmp_path):
        result = _report(str(path), "-o", str(page))
        assert result.exit_code == 2, result.output
        assert len(result.output.strip().splitlines()) == 1
        assert result.output.startswith("rankscope: error: ")
    missing = _report(str(tmp_path), "--job", "nope", "-o", str(page))
    assert missing.exit_code == 2
    assert not page.exists()


def test_the_page_renders_in_chromium_offline_and_its_screenshot_is_not_blank(
    tmp_path, chromium_present
):
    job_dir = _hung_run(str(tmp_path / "runs"))
    page = tmp_path / "page.html"
    _report(job_dir, "-o", str(page))
    net_log = str(tmp_path / "net.json")
    dom = chromium(f"file://{page}", tmp_path, net_log=net_log)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert page_requests(net_log) == []  # offline: the page asked the network for nothing
    assert "rank 3 never entered #21" in dom.stdout
    for section in ("timeline", "ranks", "hang", "trends", "trace", "environment", "events"):
        assert f'id="section-{section}"' in dom.stdout
    assert not re.search(r'(src|href)="(https?:)?//', dom.stdout)  # nothing to fetch

    shot = os.path.join(job_dir, "report-screenshot.png")  # kept beside the run's files
    taken = chromium(f"file://{page}", tmp_path, screenshot=shot)
    assert taken.returncode == 0, taken.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 1400)
    pixels = list(image.getdata())
    inked = sum(1 for p in pixels if sum(p) < 600) / len(pixels)
    reddish = sum(1 for r, g, b in pixels if r > 200 and g < 80 and b < 80)
    assert inked > 0.01, "the page looks blank"
    assert reddish > 50, "the failed verdict's red marks are missing"


def test_the_offline_check_sees_a_page_that_fetches(tmp_path, chromium_present):
    """The NetLog check above would catch a request: a page with an image and a style sheet
    on the network."""
    page = tmp_path / "fetches.html"
    page.write_text(
        '<img src="http://127.0.0.1:9/x.png"><link rel="stylesheet" href="https://a.invalid/s.css">'
    )
    net_log = str(tmp_path / "net.json")
    chromium(f"file://{page}", tmp_path, net_log=net_log)
    assert page_requests(net_log) == ["http://127.0.0.1:9/x.png", "https://a.invalid/s.css"]
