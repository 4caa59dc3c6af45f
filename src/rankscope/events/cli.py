"""`rankscope events`: what the job's processes reported to the run directory."""

from __future__ import annotations

from typing import Annotated

import typer

from rankscope.cli.common import Address, Job, Json, handle_errors, out

app = typer.Typer()


@app.command()
@handle_errors
def events(
    address: Address = None,
    job: Job = None,
    kind: Annotated[
        list[str] | None,
        typer.Option("--kind", help="Only events whose kind starts so (repeatable)."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="How many, newest last.")] = 50,
    as_json: Json = False,
) -> None:
    """What the ranks reported: consistency checks, hang reports, debug sessions, OOMs."""
    from rankscope.cli.output import to_json
    from rankscope.events.collect import job_events
    from rankscope.events.render import render_events
    from rankscope.runtime.ask import Selection

    results = job_events(address, Selection(job), kinds=kind or None, limit=limit)
    if as_json:
        out.print_json(to_json("events", results))
        return
    for found in results.jobs:
        out.print(render_events(found.job_id, list(found.events)))
