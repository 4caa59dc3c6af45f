"""`rankscope demo`: a small data-parallel job on a local Ray cluster, with a fault to find."""

from __future__ import annotations

from typing import Annotated

import typer

from rankscope.cli.common import handle_errors, out

app = typer.Typer()


@app.command()
@handle_errors
def demo(
    fault: Annotated[
        str,
        typer.Option(
            "--fault",
            help="Fault to inject: stall, hang, leak, desync, breakpoint, straggler, nan, "
            "loss-spike, error-burst, dead-rank, pending-actor, none; "
            "several (hang,leak) or all: each in turn, one job each.",
        ),
    ] = "stall",
    workers: Annotated[int, typer.Option("--workers", min=2, max=16)] = 4,
    steps: Annotated[int, typer.Option("--steps", min=1)] = 30,
    client: Annotated[
        str | None,
        typer.Option(
            "--client",
            help="Run an incident of the catalog on a real client instead: actors, verl or "
            "raytrain; --fault names it (exception, sigkill, stall_loader, ..., "
            "or list).",
        ),
    ] = None,
) -> None:
    """Run a small 4-rank data-parallel job on a local Ray cluster and debug it."""
    if client is not None:
        from rankscope.demo.incidents.run import client_faults, run_incident

        if fault == "list":
            out.print("\n".join(client_faults(client)))
            return
        raise typer.Exit(run_incident(client, fault, console=out))
    if fault == "all" or "," in fault:
        from rankscope.demo.every_fault import run_every_fault
        from rankscope.demo.faults import fault_names

        names = [n for n in fault_names() if n != "none"] if fault == "all" else fault.split(",")
        raise typer.Exit(run_every_fault(names, workers=workers, steps=steps, console=out))
    from rankscope.demo.run import run_demo

    raise typer.Exit(run_demo(fault=fault, workers=workers, steps=steps, console=out))
