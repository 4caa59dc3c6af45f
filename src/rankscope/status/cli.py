"""`rankscope status`: every registered process, its state and progress."""

from __future__ import annotations

from typing import Annotated

import typer

from rankscope.cli.common import Address, ExitCode, Group, Job, Json, handle_errors, out

app = typer.Typer()


@app.command()
@handle_errors
def status(
    address: Address = None,
    job: Job = None,
    group: Group = None,
    as_json: Json = False,
    show_all: Annotated[
        bool, typer.Option("--all", help="A row per process, however many (--json has all).")
    ] = False,
) -> None:
    """Every registered process: rank, node, pid, actor, state, last heartbeat, version.

    Past 16 processes, alike ranks (same group, role and state, close steps) share a row with
    their rank ranges; dead, unresponsive and stuck ranks keep a row each.
    """
    from rankscope.cli.output import to_json
    from rankscope.runtime.ask import Selection
    from rankscope.status.collect import any_lost, status_report
    from rankscope.status.render import render_status

    report = status_report(address, Selection(job, group))
    if as_json:
        out.print_json(to_json("status", report))
    else:
        for j in report.jobs:
            out.print(
                render_status(
                    j.job_id, j.processes, j.deaths, first_death=j.first_death, show_all=show_all
                )
            )
            for line in j.unsaid_alerts:  # the monitor's, not twice
                out.print(f"alert: {line}", style="yellow", markup=False)
            for a in j.active_alerts:
                out.print(f"alert [{a.severity}]: {a.message}", style="yellow", markup=False)
    if any_lost(report.jobs):
        raise typer.Exit(ExitCode.FINDING)
