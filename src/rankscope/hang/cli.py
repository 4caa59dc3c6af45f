"""`rankscope hang`: which rank hangs, in which collective, and where."""

from __future__ import annotations

from typing import Annotated

import typer

from rankscope.cli.common import (
    Address,
    ExitCode,
    Group,
    Job,
    Json,
    gc_paused,
    handle_errors,
    out,
    zero_or_more,
)

app = typer.Typer()


@app.command()
@handle_errors
def hang(
    address: Address = None,
    job: Job = None,
    group: Group = None,
    as_json: Json = False,
    min_wait: Annotated[
        float,
        typer.Option(
            "--min-wait",
            callback=zero_or_more,
            help="Seconds in one collective before it counts as stuck.",
        ),
    ] = 5.0,
    show_all: Annotated[
        bool, typer.Option("--all", help="Every finding and collective group, however many.")
    ] = False,
) -> None:
    """Which rank hangs, in which collective, and where: collectives aligned across ranks."""
    from rankscope.cli.output import to_json
    from rankscope.hang.collect import hang_reports
    from rankscope.hang.render import render_hang
    from rankscope.runtime.ask import Selection

    with gc_paused():  # thousands of ranks' answers
        reports = hang_reports(address, Selection(job, group), min_wait_s=min_wait)
    if as_json:
        out.print_json(to_json("hang", reports))
    else:
        for report in reports:
            out.print(render_hang(report, show_all=show_all))
    if any(not r.ok for r in reports):
        raise typer.Exit(ExitCode.FINDING)
