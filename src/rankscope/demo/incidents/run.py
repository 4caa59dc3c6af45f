"""`rankscope demo --client C --fault F`: one incident of the catalog as a worked example.

The incident runs as a real job on a new local cluster, rankscope installed only by the setup
hook. Once its symptom begins, only `rankscope report` is run, as a user paged at night would,
until it names the culprit (or `limit_s` passes); the last report is printed as the user sees
it. A healthy scenario is watched for `healthy_s`: any failing report or alert is a false alarm.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

from rich.console import Console

from rankscope.demo.incidents.catalog import catalog
from rankscope.demo.incidents.common import Incident
from rankscope.demo.incidents.job import JobRun, cluster_env, launch, start_cluster, tear_down
from rankscope.demo.incidents.judge import Poll, judge, report
from rankscope.errors import UserError

CLIENTS = ("actors", "verl", "raytrain")
LIMIT_S = 60.0
"""From the symptom, how long `report` may take to name the culprit before the demo gives up."""
HEALTHY_S = 60.0
"""How long a healthy scenario is watched for a false alarm."""
POLL_S = 1.0


def client_faults(client: str) -> list[str]:
    """The fault names `--fault` takes with `--client client`, healthy scenarios included."""
    if client not in CLIENTS:
        raise UserError(f"--client {client!r}: choose one of {', '.join(CLIENTS)}")
    prefix = f"{client}-"
    return [
        i.name.removeprefix(prefix) if i.name.startswith(prefix) else i.name
        for i in catalog()
        if i.client == client
    ]


def find_incident(client: str, fault: str) -> Incident:
    """The catalog entry `client-fault` (or a healthy scenario of that client by its name)."""
    faults = client_faults(client)
    for incident in catalog():
        if incident.client == client and incident.name in (f"{client}-{fault}", fault):
            return incident
    names = ", ".join(faults)
    raise UserError(f"--fault {fault!r} with --client {client}: choose one of {names}, or list")


def run_incident(client: str, fault: str, console: Console) -> int:
    """Exit code 0 when `report` named the incident (or a healthy job stayed quiet)."""
    incident = find_incident(client, fault)
    if client == "verl":
        _need("verl", "pip install verl --no-deps (its single controller is all the demo uses)")
    tmp = tempfile.mkdtemp(prefix="rankscope-incident-")
    cluster_env(tmp)
    console.print(f"[bold]rankscope demo[/] {incident.name}: {incident.description}")
    want = incident.expected.describe() if incident.expected else "no finding, no alert"
    console.print(f"expected answer: {want}")
    cluster = start_cluster()
    try:
        run = launch(incident, cluster, tmp)
        try:
            right = _watch(run, console)
            _print_report(run, tmp, console)
        finally:
            tear_down(run)
    finally:
        cluster.shutdown()
    console.print(f"the job's driver.log and report page: {tmp}")
    return 0 if right else 1


def _watch(run: JobRun, console: Console) -> bool:
    if not run.job_id:
        console.print("[red]the job did not start[/]: see driver.log")
        return False
    report_command = f"rankscope report --json --address {run.address} --job {run.job_id}"
    if run.incident.healthy:
        console.print(f"healthy job {run.job_id}: `{report_command}` for {HEALTHY_S:.0f} s")
        return _watch_healthy(run, console)
    at = run.wait_symptom()
    if at is None:
        console.print("[red]the job ended before its fault began[/]: see driver.log")
        return False
    console.print(f"the fault began; running only `{report_command}` until it names it")
    poll: Poll | None = None
    while time.time() < at + LIMIT_S:
        begun = time.time()
        poll = report(run.address, run.job_id)
        if judge(run.incident.expected, poll.diagnosis):
            console.print(f"[green]named in {poll.ended - at:.1f} s[/]: {poll.said()}")
            return True
        time.sleep(max(0.0, POLL_S - (time.time() - begun)))
    said = poll.said() if poll else "no report"
    console.print(f"[red]not named in {LIMIT_S:.0f} s[/]; the last report said: {said}")
    return False


def _watch_healthy(run: JobRun, console: Console) -> bool:
    start = time.time()
    while time.time() < start + HEALTHY_S:
        begun = time.time()
        poll = report(run.address, run.job_id)
        level = (poll.diagnosis or {}).get("level")
        if poll.code == 1 or level == "fail":
            console.print(f"[red]false alarm at {poll.ended - start:.0f} s[/]: {poll.said()}")
            return False
        time.sleep(max(0.0, POLL_S - (time.time() - begun)))
    console.print(f"[green]quiet for {HEALTHY_S:.0f} s[/]: no finding")
    return True


def _print_report(run: JobRun, tmp: str, console: Console) -> None:
    """The report a user reads: `rankscope report` on the live job, its page under `tmp`."""
    if not run.job_id:
        return
    page = os.path.join(tmp, f"rankscope-report-{run.job_id}.html")
    command = [sys.executable, "-m", "rankscope.cli.main", "report", "-o", page]
    command += ["--address", run.address, "--job", run.job_id]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    console.print(f"\n$ rankscope report --address {run.address} --job {run.job_id}")
    console.print(done.stdout.rstrip(), markup=False, highlight=False)


def _need(module: str, how: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise UserError(f"--client {module} needs {module} installed: {how}")
