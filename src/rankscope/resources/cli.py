"""`rankscope why-pending` and `rankscope plan`: why work waits, and where work would go."""

from __future__ import annotations

from typing import Annotated

import typer

from rankscope.cli.common import Address, ExitCode, Json, handle_errors, out, zero_or_more

app = typer.Typer()


@app.command("why-pending")
@handle_errors
def why_pending(address: Address = None, as_json: Json = False) -> None:
    """Every pending task, actor and placement group, and why: infeasible, waiting, or args."""
    from rankscope.cli.output import to_json
    from rankscope.resources.collect import pending_report
    from rankscope.resources.render import render_pending

    report = pending_report(address)
    if as_json:
        out.print_json(to_json("why-pending", report))
    else:
        out.print(render_pending(report))
    raise typer.Exit(ExitCode.FINDING if report.infeasible else ExitCode.OK)


@app.command()
@handle_errors
def plan(
    workers: Annotated[int, typer.Argument(help="How many workers (bundles) to place.")],
    gpus_per_worker: Annotated[
        float, typer.Option("--gpus-per-worker", callback=zero_or_more)
    ] = 1.0,
    cpus_per_worker: Annotated[
        float, typer.Option("--cpus-per-worker", callback=zero_or_more)
    ] = 1.0,
    min_gpu_memory: Annotated[
        float,
        typer.Option("--min-gpu-memory", callback=zero_or_more, help="GB a GPU must have free."),
    ] = 0.0,
    prefer: Annotated[
        str | None,
        typer.Option("--prefer", help="Preferred node type: a label value or custom resource."),
    ] = None,
    fallback: Annotated[str, typer.Option("--fallback", help="cpu_backup, wait or fail.")] = "fail",
    address: Address = None,
    as_json: Json = False,
) -> None:
    """Where SmartResourceAllocator would put the workers, and why (reserves nothing)."""
    from rankscope.cli.output import to_json
    from rankscope.resources.api import SmartResourceAllocator, plan_on_cluster
    from rankscope.resources.render import render_plan

    allocator = SmartResourceAllocator(min_gpu_memory, prefer, fallback)  # bad options: exit 2
    result, unplaced = plan_on_cluster(
        address,
        allocator,
        workers,
        gpus_per_worker=gpus_per_worker,
        cpus_per_worker=cpus_per_worker,
    )
    if unplaced and not as_json:
        out.print(unplaced, markup=False)
    if as_json:
        out.print_json(to_json("plan", result))
    else:
        out.print(render_plan(result))
    raise typer.Exit(ExitCode.FINDING if result.unplaced else ExitCode.OK)
