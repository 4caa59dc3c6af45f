"""`rankscope demo`: a 4-rank gloo job on an embedded Ray cluster, a fault, and its diagnosis.

The driver starts a local Ray cluster with the probe installed through
`worker_process_setup_hook`, trains, waits until progress stops, shows what `rankscope stacks`
shows, and shuts everything down. Exit code 0 when the injected fault was found.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console

from rankscope.analysis.stacks import StackReport, summarize
from rankscope.errors import UserError

if TYPE_CHECKING:
    from rankscope.runtime.client import HubClient

FAULTS = ("stall", "none")
STALL_DETECT_S = 2.0
"""Seconds with no step on any rank before the demo looks at the stacks."""
STARTUP_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class DemoPlan:
    fault: str
    workers: int
    steps: int

    def __post_init__(self) -> None:
        if self.fault not in FAULTS:
            raise UserError(f"--fault {self.fault!r}: choose one of {', '.join(FAULTS)}")
        if self.fault != "none" and self.steps < 3:
            raise UserError(f"--steps {self.steps}: a fault needs at least 3 steps")

    @property
    def fault_rank(self) -> int:
        return self.workers - 1

    @property
    def fault_step(self) -> int:
        return min(5, self.steps - 1)


def run_demo(*, fault: str, workers: int, steps: int, console: Console) -> int:
    plan = DemoPlan(fault, workers, steps)
    import ray

    console.print(f"[bold]rankscope demo[/]: {plan.workers} ranks, gloo, fault={plan.fault}")
    ray.init(
        num_cpus=plan.workers,
        include_dashboard=False,
        logging_level=logging.ERROR,
        log_to_driver=False,
        runtime_env={
            "worker_process_setup_hook": "rankscope.setup_worker",
            "env_vars": {"RANKSCOPE_HEARTBEAT_INTERVAL": "0.5", "OMP_NUM_THREADS": "1"},
        },
    )
    try:
        return _run(plan, console)
    finally:
        ray.shutdown()


def _run(plan: DemoPlan, console: Console) -> int:
    import ray

    from rankscope.cli.render import render_stacks, render_status
    from rankscope.demo.train import DemoWorker

    worker_cls: Any = ray.remote(num_cpus=1)(DemoWorker)
    actors = [
        worker_cls.remote(rank, plan.workers, plan.fault, plan.fault_rank, plan.fault_step)
        for rank in range(plan.workers)
    ]
    host, port = ray.get(actors[0].address.remote())
    ray.get([a.join.remote(host, port) for a in actors])
    client = _wait_for_probes(plan.workers)
    console.print(f"{plan.workers} ranks joined the gloo group; probes registered; training...")
    started = time.time()
    runs = [a.train.remote(plan.steps) for a in actors]

    if plan.fault == "none":
        losses = ray.get(runs)
        rate = plan.steps / (time.time() - started)
        console.print(
            f"trained {plan.steps} steps at {rate:.1f} steps/s; "
            f"loss {losses[0][0]:.4f} -> {losses[0][-1]:.4f} on every rank"
        )
        job_id = ray.get_runtime_context().get_job_id()
        ranked = [p for p in client.probes(job_id) if p.context.rank is not None]
        console.print(render_status(job_id, sorted(ranked, key=lambda p: p.context.rank or 0)))
        return 0

    _wait_until_stalled(client, plan.workers)
    console.print(f"no rank has made progress for {STALL_DETECT_S:g}s; taking stacks...\n")
    report = _stacks(client)
    verdict = summarize(report)
    console.print(render_stacks(report))
    found = verdict is not None and f"rank {plan.fault_rank} is elsewhere: load_batch" in verdict
    for actor in actors:
        ray.kill(actor)
    console.print("demo done: workers stopped, cluster shut down.")
    return 0 if found else 1


def _wait_for_probes(count: int) -> HubClient:
    """The hub exists once the first probe created it; wait for every rank to register."""
    from rankscope.runtime.client import HubClient

    deadline = time.time() + STARTUP_TIMEOUT_S
    while time.time() < deadline:
        try:
            client = HubClient.attach()
            ranked = [p for p in client.probes() if p.context.rank is not None]
            if len(ranked) >= count:
                return client
        except UserError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the {count} demo ranks did not register within {STARTUP_TIMEOUT_S:.0f}s")


def _wait_until_stalled(client: HubClient, count: int) -> None:
    _poll(
        lambda: all(
            time.time() - p.progress.last_progress > STALL_DETECT_S and p.progress.step > 0
            for p in client.probes()
            if p.context.rank is not None
        ),
        what="the injected stall",
    )


def _poll(done: Callable[[], bool], what: str) -> None:
    deadline = time.time() + STARTUP_TIMEOUT_S
    while not done():
        if time.time() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.25)


def _stacks(client: HubClient) -> StackReport:
    from rankscope.cli.commands import stacks

    return stacks(None, None, None, 2.0, client=client)[0]
