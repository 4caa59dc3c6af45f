"""`rankscope diagnose`: cluster self-checks, each owned by the feature it checks.

    rankscope diagnose                        environment of every registered process
    rankscope diagnose --mode memory_profile  memory snapshot of every rank (rankscope.memory)
    rankscope diagnose --check-debug-ports    debug sessions' ports (rankscope.debug)

Each check is a function `(address, job, as_json, console) -> exit code` in its feature package,
imported only when asked for.
"""

from __future__ import annotations

import importlib
from typing import Annotated, Protocol

import typer
from rich.console import Console

from rankscope.cli.common import Address, ExitCode, Job, Json, handle_errors, out
from rankscope.errors import UserError

app = typer.Typer()

MODES = {
    "memory_profile": "rankscope.memory.diagnose:memory_profile",
}
DEBUG_PORTS_CHECK = "rankscope.debug.ports:check_debug_ports"
ENVIRONMENT_CHECK = "rankscope.doctor.cli:check_environment"


class Check(Protocol):
    def __call__(
        self, address: str | None, job: str | None, as_json: bool, console: Console
    ) -> int: ...


@app.command()
@handle_errors
def diagnose(
    address: Address = None,
    job: Job = None,
    mode: Annotated[
        str | None, typer.Option("--mode", help="A deeper check: memory_profile.")
    ] = None,
    check_debug_ports: Annotated[
        bool,
        typer.Option("--check-debug-ports", help="Check every debug session's port."),
    ] = False,
    as_json: Json = False,
) -> None:
    """Cluster self-checks: environment, memory of every rank, debug ports."""
    if mode is not None and mode not in MODES:
        raise UserError(f"--mode {mode!r}: choose one of {', '.join(sorted(MODES))}")
    if check_debug_ports:
        target = DEBUG_PORTS_CHECK
    elif mode is not None:
        target = MODES[mode]
    else:
        target = ENVIRONMENT_CHECK
    raise typer.Exit(_load(target)(address, job, as_json, out))


def check_environment(address: str | None, job: str | None, as_json: bool, console: Console) -> int:
    """Every rank's environment, and what differs between them; exit 1 on a difference."""
    from rankscope.cli.output import to_json
    from rankscope.doctor.collect import job_environments
    from rankscope.doctor.render import render_environment

    results = job_environments(address, job)
    if as_json:
        data = {
            r.job_id: {"processes": r.processes, "findings": r.findings, "unanswered": r.unanswered}
            for r in results
        }
        console.print_json(to_json("diagnose", data))
    else:
        for r in results:
            console.print(render_environment(r))
    return ExitCode.FINDING if any(r.findings for r in results) else ExitCode.OK


def _load(target: str) -> Check:
    module, _, name = target.partition(":")
    check: Check = getattr(importlib.import_module(module), name)
    return check
