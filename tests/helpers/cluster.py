"""Helpers that talk to the session cluster: hub waits, the real CLI, a webhook, Chromium."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import ray

from helpers.workers import wait_until
from rankscope.errors import NoHubError
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeState, ProbeStatus

GLOO_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gloo_job.py")
"""A separate Ray job with a healthy 4-rank gloo group: `python GLOO_JOB ADDRESS`."""


def probes_by_pid(pids: Iterable[int]) -> dict[int, ProbeStatus]:
    """The hub's records of these pids (newest registration wins)."""
    wanted = set(pids)
    found: dict[int, ProbeStatus] = {}
    try:
        probes = HubClient.attach().probes()
    except (NoHubError, ray.exceptions.RayActorError):
        return found  # between a hub's death and its successor
    for p in sorted(probes, key=lambda p: p.registered_at):
        if p.context.pid in wanted:
            found[p.context.pid] = p
    return found


def wait_registered(pids: list[int], *, ranked: bool = False, timeout: float = 60.0) -> None:
    def ready() -> bool:
        found = probes_by_pid(pids)
        return len(found) == len(pids) and all(
            p.state == ProbeState.ALIVE and (not ranked or p.context.rank is not None)
            for p in found.values()
        )

    wait_until(ready, timeout=timeout, what=f"probes of pids {pids} to register")


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 240.0
) -> subprocess.CompletedProcess[str]:
    """The real `rankscope` command in a subprocess, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "rankscope.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def run_demo(
    *args: str, env: dict[str, str] | None = None, timeout: float = 240.0
) -> subprocess.CompletedProcess[str]:
    """`rankscope demo ...` as a user runs it: its own embedded cluster, its own Ray temp dir."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="rs-demo-", dir="/tmp") as ray_tmp:
        own = {"RAY_TMPDIR": ray_tmp, "RANKSCOPE_RUN_DIR": ""}
        return run_cli("demo", *args, env={**own, **(env or {})}, timeout=timeout)


def line_of(function: object, text: str) -> int:
    """The line number of the first line of `function` that contains `text`."""
    import inspect

    lines, first = inspect.getsourcelines(function)  # type: ignore[arg-type]
    return first + next(i for i, line in enumerate(lines) if text in line)


def seen_in(function: object, file: str) -> str:
    """A pattern for a rank caught in `function`'s wait loop: on any of its lines, maybe inside a
    library call it makes (`exists <- wait_for_data workers.py:158`): a sample lands anywhere."""
    import inspect

    lines, first = inspect.getsourcelines(function)  # type: ignore[arg-type]
    numbers = "|".join(str(first + i) for i in range(len(lines)))
    name = function.__name__  # type: ignore[attr-defined]
    return rf"(?:\w+ <- )?{name} {re.escape(file)}:(?:{numbers})\b"


def cluster_address() -> str:
    return str(ray.get_runtime_context().gcs_address)


CHROMIUM = "/usr/bin/chromium"
"""Debian's package: `.ci/run` installs it where missing (tests of pages need a real browser)."""


def chromium(
    url: str, tmp_path, *, screenshot: str | None = None, net_log: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Headless Chromium on `url`: the DOM after scripts ran (stdout), or a 1200x1400 PNG;
    with `net_log`, every request of the session recorded there (`page_requests` reads it)."""
    output = (
        [f"--screenshot={screenshot}", "--window-size=1200,1400"] if screenshot else ["--dump-dom"]
    )
    if net_log:
        output += [f"--log-net-log={net_log}", "--disable-background-networking"]
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'chromium-profile'}",
            "--enable-logging=stderr",
            "--v=0",
            *output,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )


def page_requests(net_log: str) -> list[str]:
    """The URLs the page asked the network for, from Chromium's NetLog (`--log-net-log`).

    File and data URLs never reach the network stack: a self-contained page's list is empty.
    The browser's own requests (component updates, the clock check: initiator "not an origin",
    not the page's file:// isolation key) are not the page's and are left out.
    """
    with open(net_log, encoding="utf-8") as f:
        text = f.read()
    try:
        log = json.loads(text)
    except ValueError:  # Chromium killed before closing the file: close the events list
        log = json.loads(text.rstrip().rstrip(",") + "]}")
    types = log["constants"]["logEventTypes"]
    wanted = {types["URL_REQUEST_START_JOB"], types["CORS_REQUEST"]}
    urls = []
    for event in log["events"]:
        params = event.get("params") or {}
        if event.get("type") not in wanted or "url" not in params:
            continue
        own = params.get("initiator", "not an origin") == "not an origin" and not str(
            params.get("network_isolation_key", "")
        ).startswith("file://")
        if not own and params["url"] not in urls:
            urls.append(params["url"])
    return urls


@contextlib.contextmanager
def webhook_server() -> Iterator[tuple[str, list[dict]]]:
    """A local HTTP server that keeps every JSON body POSTed to it: (its URL, the bodies)."""
    received: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hook", received
    finally:
        server.shutdown()
