"""`rankscope demo --fault all` (or `--fault hang,leak`): each fault as its own Ray job on one
embedded cluster.

Each fault runs in a child driver process (a Ray job is a driver's connection), one after
another, against the cluster this process started; the table at the end says what was found,
by which command, how fast, and where each job's report is.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
import tempfile

from rich.console import Console
from rich.table import Table

from rankscope.demo.faults import get_fault
from rankscope.demo.model import Outcome
from rankscope.demo.run import DemoPlan, run_fault

FAULT_TIMEOUT_S = 600.0
"""One fault's job at most, start-up included (a slow machine starts workers in tens of s)."""


def run_every_fault(faults: list[str], *, workers: int, steps: int, console: Console) -> int:
    """`faults` one after another, each its own job; exit code 0 only when all were found."""
    import ray

    plans = [DemoPlan(name.strip(), workers, steps) for name in faults]  # bad names: fail first
    run_dir = tempfile.mkdtemp(prefix="rankscope-demo-all-")
    console.print(f"[bold]rankscope demo --fault all[/]: {len(plans)} faults, one job each")
    ray.init(
        address="local",
        num_cpus=workers,
        include_dashboard=False,
        logging_level=logging.ERROR,
        log_to_driver=False,
    )
    try:
        address = ray.get_runtime_context().gcs_address
        outcomes = [_run_child(plan, address, run_dir, console) for plan in plans]
    finally:
        ray.shutdown()
    console.print(outcome_table(outcomes))
    for o in outcomes:
        console.print(f"report of {o.fault}: {o.report or 'none'}", soft_wrap=True)
    console.print(f"run directory: {run_dir}", soft_wrap=True)
    return 0 if all(o.found for o in outcomes) else 1


def outcome_table(outcomes: list[Outcome]) -> Table:
    table = Table("fault", "found", "in", "by", "what rankscope found")
    for o in outcomes:
        table.add_row(
            o.fault,
            "yes" if o.found else "[bold red]NO[/]",
            f"{o.seconds:.1f} s",
            get_fault(o.fault).command,
            o.verdict,
        )
    return table


def _run_child(plan: DemoPlan, address: str, run_dir: str, console: Console) -> Outcome:
    console.print(f"\n[bold]fault {plan.fault}[/]: {get_fault(plan.fault).description}")
    args = [plan.fault, address, run_dir, str(plan.workers), str(plan.steps)]
    try:
        child = subprocess.run(
            [sys.executable, "-m", "rankscope.demo.every_fault", *args],
            stdout=subprocess.PIPE,  # the outcome; its console goes to our stderr as it runs
            text=True,
            timeout=FAULT_TIMEOUT_S,
        )
        lines = child.stdout.strip().splitlines()
        if child.returncode == 0 and lines:
            return Outcome(**json.loads(lines[-1]))
        why = f"its job exited with code {child.returncode}"
    except subprocess.TimeoutExpired:
        why = f"its job ran past {FAULT_TIMEOUT_S:.0f} s"
    return Outcome(plan.fault, False, 0.0, why, "")


def _child_main(argv: list[str]) -> None:
    fault, address, run_dir, workers, steps = argv
    plan = DemoPlan(fault, int(workers), int(steps))
    outcome = run_fault(plan, Console(stderr=True), run_dir, address=address)
    print(json.dumps(dataclasses.asdict(outcome)))


if __name__ == "__main__":
    _child_main(sys.argv[1:])
