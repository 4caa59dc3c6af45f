"""`rankscope demo`: a data-parallel gloo job on an embedded Ray cluster, a fault, a diagnosis.

The driver starts a local Ray cluster with the probe installed through
`worker_process_setup_hook`, trains, lets the chosen fault's diagnosis find what went wrong,
and shuts everything down. Exit code 0 when the injected fault was found.
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from rankscope.demo.faults import fault_names, get_fault
from rankscope.demo.model import Outcome
from rankscope.demo.session import DemoSession
from rankscope.errors import UserError

STARTUP_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class DemoPlan:
    fault: str
    workers: int
    steps: int

    def __post_init__(self) -> None:
        if self.fault not in fault_names():
            names = ", ".join(fault_names())
            raise UserError(f"--fault {self.fault!r}: choose one of {names}, or all")
        needed = get_fault(self.fault).min_steps
        if self.fault != "none" and self.steps < needed:
            raise UserError(f"--steps {self.steps}: fault {self.fault} needs at least {needed}")

    @property
    def fault_rank(self) -> int:
        return self.workers - 1

    @property
    def fault_step(self) -> int:
        return min(get_fault(self.fault).at_step, self.steps - 1)


def run_demo(*, fault: str, workers: int, steps: int, console: Console) -> int:
    """One fault on a new embedded cluster (`--fault all` and lists: every_fault.py)."""
    plan = DemoPlan(fault, workers, steps)
    run_dir = tempfile.mkdtemp(prefix="rankscope-demo-")
    console.print(f"[bold]rankscope demo[/]: {plan.workers} ranks, gloo, fault={plan.fault}")
    outcome = run_fault(plan, console, run_dir, address="local")
    console.print(
        f"demo done ({'found it' if outcome.found else 'NOT found'}); run directory: {run_dir}"
    )
    return 0 if outcome.found else 1


def run_fault(plan: DemoPlan, console: Console, run_dir: str, *, address: str) -> Outcome:
    """One fault as one Ray job: on a new embedded cluster (`address="local"`, even beside a
    running one), or on the cluster at `address` (`--fault all` runs each fault so)."""
    import ray

    ray.init(
        address=address,
        num_cpus=plan.workers if address == "local" else None,
        include_dashboard=False,
        logging_level=logging.ERROR,
        log_to_driver=False,
        runtime_env={
            "worker_process_setup_hook": "rankscope.setup_worker",
            "env_vars": {
                "RANKSCOPE_HEARTBEAT_INTERVAL": "0.5",
                "RANKSCOPE_HANG_TIMEOUT": "5",
                "RANKSCOPE_RUN_DIR": run_dir,
                "OMP_NUM_THREADS": "1",
            },
        },
    )
    try:
        session = _start(plan, console, run_dir)
        started = time.time()
        found = get_fault(plan.fault).diagnose(session)
        seconds = time.time() - started
        session.flush_events()
        verdict, report = _write_report(session)
        for actor in [*session.actors, *session.others]:
            ray.kill(actor)
    finally:
        ray.shutdown()
    return Outcome(plan.fault, found, seconds, verdict, report)


def _start(plan: DemoPlan, console: Console, run_dir: str) -> DemoSession:
    import ray

    from rankscope.demo.train import DemoWorker

    worker_cls: Any = ray.remote(num_cpus=1)(DemoWorker)
    actors = [
        worker_cls.remote(rank, plan.workers, plan.fault, plan.fault_rank, plan.fault_step)
        for rank in range(plan.workers)
    ]
    host, port = ray.get(actors[0].address.remote())
    ray.get([a.join.remote(host, port) for a in actors])
    job_id = ray.get_runtime_context().get_job_id()
    client = _wait_for_probes(plan.workers, job_id)
    console.print(f"{plan.workers} ranks joined the gloo group; probes registered; training...")
    return DemoSession(
        fault=plan.fault,
        workers=plan.workers,
        steps=plan.steps,
        fault_rank=plan.fault_rank,
        fault_step=plan.fault_step,
        actors=actors,
        runs=[a.train.remote(plan.steps) for a in actors],
        client=client,
        console=console,
        run_dir=run_dir,
        job_id=job_id,
    )


def _write_report(session: DemoSession) -> tuple[str, str]:
    """The job's page (`rankscope report`), live, before the ranks go: into the run directory."""
    import os

    from rankscope.report.analysis import build_report
    from rankscope.report.collect import collect_run
    from rankscope.report.render import write_html

    report = build_report(collect_run(None, None, session.job_id), time.time())
    path = write_html(report, os.path.join(session.run_dir, session.job_id, "report.html"))
    session.console.print(f"report: {path}\n  verdict: {report.verdict}")
    return report.verdict, path


def _wait_for_probes(count: int, job_id: str) -> Any:
    """The hub exists once the first probe created it; wait for every rank to register."""
    from rankscope.runtime.client import HubClient

    deadline = time.time() + STARTUP_TIMEOUT_S
    while time.time() < deadline:
        try:
            client = HubClient.attach()
            if len([p for p in client.probes(job_id) if p.context.rank is not None]) >= count:
                return client
        except UserError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the {count} demo ranks did not register within {STARTUP_TIMEOUT_S:.0f}s")
