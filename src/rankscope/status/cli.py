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
    from rankscope.alerts.collect import job_alerts
    from rankscope.cli.output import to_json
    from rankscope.monitor.collect import alert_lines
    from rankscope.runtime.client import HubClient
    from rankscope.status.collect import STATUS_SUMMARIES, any_lost, job_statuses
    from rankscope.status.render import render_status

    client = HubClient.attach(address)
    jobs = job_statuses(address, job, group, client=client, summaries=STATUS_SUMMARIES)
    active = {
        j.job_id: [a for a in job_alerts(client, j.job_id, list(j.processes)) if a.active]
        for j in jobs
    }  # the ranks' alert rules (rankscope alerts), from the run directory's events
    if as_json:
        data = {
            j.job_id: {
                "processes": j.processes,
                "deaths": j.deaths,
                "first_death": j.first_death,
                "alerts": alert_lines(j.processes),  # the monitor's, from the heartbeats
                "active_alerts": active[j.job_id],
            }
            for j in jobs
        }
        out.print_json(to_json("status", data))
    else:
        for j in jobs:
            out.print(
                render_status(
                    j.job_id, j.processes, j.deaths, first_death=j.first_death, show_all=show_all
                )
            )
            for line in alert_lines(j.processes, active[j.job_id]):  # the monitor's, not twice
                out.print(f"alert: {line}", style="yellow", markup=False)
            for a in active[j.job_id]:
                out.print(f"alert [{a.severity}]: {a.message}", style="yellow", markup=False)
    if any_lost(jobs):
        raise typer.Exit(ExitCode.FINDING)
