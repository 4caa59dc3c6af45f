"""What a user sees of an incident: `rankscope report --json` on the live job, and whether its
`data.diagnosis` is the expected answer (kind, culprit and where, all right)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from rankscope.demo.incidents.common import Expected

REPORT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Poll:
    """One `rankscope report --json` run: when it ended, its exit code, what it said."""

    ended: float
    seconds: float
    code: int
    diagnosis: dict[str, Any] | None
    verdict: str

    def said(self) -> str:
        """The diagnosis in one line, else the verdict's sentence."""
        d = self.diagnosis
        if d:
            ranks = ",".join(map(str, d.get("ranks") or []))
            return (
                f"{d.get('kind')} {d.get('culprit')} [{ranks}] {d.get('where')} ({d.get('level')})"
            )
        return f"verdict: {self.verdict}" if self.verdict else "(no verdict)"


def report(address: str, job_id: str) -> Poll:
    """`rankscope report --json` on the live job, as a user runs it."""
    begun = time.time()
    command = [sys.executable, "-m", "rankscope.cli.main", "report", "--json"]
    command += ["--address", address, "--job", job_id]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=REPORT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return Poll(time.time(), time.time() - begun, 124, None, "report timed out")
    ended = time.time()
    data = envelope_data(done.stdout)
    if data is None:
        said = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        return Poll(ended, ended - begun, done.returncode, None, f"(exit {done.returncode}) {said}")
    diagnosis = data.get("diagnosis")
    return Poll(ended, ended - begun, done.returncode, diagnosis, str(data.get("verdict", "")))


def envelope_data(stdout: str) -> dict[str, Any] | None:
    """The `--json` envelope's data; anything printed before the JSON (a library's warning
    on stdout) is skipped."""
    start = stdout.find("{")
    while start != -1:
        try:
            data = json.loads(stdout[start:])["data"]
            return data if isinstance(data, dict) else None
        except (ValueError, KeyError, TypeError):
            start = stdout.find("\n{", start + 1)
            start = start + 1 if start != -1 else -1
    return None


def judge(expected: Expected | None, diagnosis: dict[str, Any] | None) -> bool:
    """Top-1: the kind, the culprit's ranks (or its name) and where, all right."""
    if expected is None or not diagnosis:
        return False
    if diagnosis.get("kind") not in expected.kinds:
        return False
    ranks_matter = expected.ranks or not expected.culprit  # a named culprit that is no rank
    if ranks_matter and sorted(diagnosis.get("ranks") or []) != sorted(expected.ranks):
        return False
    if expected.culprit and expected.culprit not in str(diagnosis.get("culprit", "")):
        return False
    return expected.where in str(diagnosis.get("where", ""))


def names(expected: Expected, verdict: str) -> bool:
    """The sentence names the culprit (`rank N` for each rank, or its name) and the where."""
    for rank in expected.ranks:
        if not re.search(rf"\branks? (\d+,)*{rank}\b", verdict):
            return False
    if expected.culprit and expected.culprit not in verdict:
        return False
    return expected.where in verdict
