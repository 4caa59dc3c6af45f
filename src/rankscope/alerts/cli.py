"""`rankscope alerts`: the job's alerts, newest first; exit 1 while any is active."""

from __future__ import annotations

import typer

from rankscope.cli.common import Address, ExitCode, Job, Json, handle_errors, out

app = typer.Typer()


@app.command()
@handle_errors
def alerts(address: Address = None, job: Job = None, as_json: Json = False) -> None:
    """Alerts of the job (memory, ERROR bursts, new errors, your rules, silent ranks)."""
    from rankscope.alerts.collect import collect_alerts
    from rankscope.alerts.render import render_alerts
    from rankscope.cli.output import to_json

    results = collect_alerts(address, job)
    if as_json:
        out.print_json(to_json("alerts", results))
    else:
        for result in results:
            out.print(render_alerts(result))
    if any(r.active for r in results):
        raise typer.Exit(ExitCode.FINDING)
