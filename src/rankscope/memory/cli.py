"""`rankscope memory`: every rank's host and GPU memory, least headroom first."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from rankscope.cli.common import Address, ExitCode, Group, Job, Json, handle_errors, out
from rankscope.errors import UserError

if TYPE_CHECKING:
    from rankscope.memory.collect import JobMemory

app = typer.Typer()

WATCH_INTERVAL_S = 2.0


@app.command()
@handle_errors
def memory(
    address: Address = None,
    job: Job = None,
    group: Group = None,
    watch: Annotated[
        bool, typer.Option("--watch", help="Refresh every 2s until Ctrl-C; adds a leak trend.")
    ] = False,
    by_gpu: Annotated[
        bool,
        typer.Option(
            "--by-gpu", help="Processes grouped by the physical GPU they use, with co-tenants."
        ),
    ] = False,
    as_json: Json = False,
) -> None:
    """Every rank's host and GPU memory, least headroom first, with alerts and leaks."""
    if by_gpu:
        if watch:
            raise UserError("--by-gpu shows one look; drop --watch (or drop --by-gpu)")
        raise typer.Exit(run_by_gpu(address, job, as_json=as_json, console=out, group=group))
    raise typer.Exit(
        run_memory(address, job, watch=watch, as_json=as_json, console=out, group=group)
    )


def run_memory(
    address: str | None,
    job: str | None,
    *,
    watch: bool,
    as_json: bool,
    console: Console,
    group: str | None = None,
) -> int:
    """Exit code 1 when a rank has an alert, a leak or no answer."""
    from rich.console import Group as Renderables
    from rich.live import Live

    from rankscope.cli.output import to_json
    from rankscope.memory.collect import cluster_memory, watch_views
    from rankscope.memory.render import render
    from rankscope.runtime.ask import Selection

    chosen = Selection(job, group)
    if not watch:
        views = cluster_memory(address, chosen)
        if as_json:
            console.print_json(to_json("memory", [v.view for v in views]))
        else:
            for v in views:
                console.print(render(v.view))
        return _exit_code(views)
    if as_json:
        last = watch_views(
            address,
            chosen,
            interval_s=WATCH_INTERVAL_S,
            show=lambda views: console.print(
                to_json("memory", [v.view for v in views]), soft_wrap=True
            ),
        )
        return _exit_code(last)
    with Live(console=console, auto_refresh=False) as live:
        last = watch_views(
            address,
            chosen,
            interval_s=WATCH_INTERVAL_S,
            show=lambda views: live.update(
                Renderables(*(render(v.view) for v in views)), refresh=True
            ),
        )
    return _exit_code(last)


def run_by_gpu(
    address: str | None, job: str | None, *, as_json: bool, console: Console, group: str | None
) -> int:
    """Exit code 1 when a GPU is over-subscribed or its co-tenants pass the threshold."""
    from rankscope.cli.output import to_json
    from rankscope.memory.collect_by_gpu import collect_by_gpu, render_by_gpu
    from rankscope.runtime.ask import Selection

    views = collect_by_gpu(address, Selection(job, group))
    if as_json:
        console.print_json(to_json("memory.by_gpu", views))
    else:
        for v in views:
            console.print(render_by_gpu(v))
    return ExitCode.FINDING if any(v.has_findings for v in views) else ExitCode.OK


def _exit_code(views: Sequence[JobMemory]) -> int:
    return ExitCode.FINDING if any(v.view.has_findings for v in views) else ExitCode.OK
