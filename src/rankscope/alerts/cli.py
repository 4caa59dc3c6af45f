"""`rankscope alerts [--ack RULE|all]`: the job's alerts, newest first; exit 1 while any is
active (neither ended, resolved nor acknowledged)."""

from __future__ import annotations

from typing import Annotated

import typer

from rankscope.cli.common import Address, ExitCode, Job, Json, handle_errors, out

app = typer.Typer()


@app.command()
@handle_errors
def alerts(
    address: Address = None,
    job: Job = None,
    ack: Annotated[
        str | None,
        typer.Option("--ack", help="Acknowledge RULE's alerts (or all): no longer active."),
    ] = None,
    as_json: Json = False,
) -> None:
    """Alerts of the job (memory, ERROR bursts, new errors, your rules, silent ranks)."""
    from rankscope.alerts.collect import collect_alerts
    from rankscope.alerts.render import render_alerts
    from rankscope.cli.output import to_json
    from rankscope.errors import UserError
    from rankscope.runtime.ask import Selection

    if ack is not None and not ack.strip():
        raise UserError("--ack needs a rule name (as `rankscope alerts` shows it) or all")
    results = collect_alerts(address, Selection(job), ack=ack.strip() if ack is not None else None)
    if as_json:
        out.print_json(to_json("alerts", results))
    else:
        for result in results:
            out.print(render_alerts(result))
    if any(r.active for r in results):
        raise typer.Exit(ExitCode.FINDING)
