"""`rankscope stacks`: Python stacks of every thread of every rank, grouped."""

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
    over_zero,
)

app = typer.Typer()


@app.command()
@handle_errors
def stacks(
    address: Address = None,
    job: Job = None,
    group: Group = None,
    ranks: Annotated[
        str | None, typer.Option("--ranks", help="Only these ranks, e.g. 0,3-5.")
    ] = None,
    as_json: Json = False,
    deadline: Annotated[
        float,
        typer.Option(
            "--deadline", callback=over_zero, help="Seconds to wait for probes before py-spy."
        ),
    ] = 2.0,
    all_frames: Annotated[
        bool, typer.Option("--all-frames", help="Do not fold library frames.")
    ] = False,
    show_all: Annotated[
        bool,
        typer.Option("--all", help="Every distinct stack and every rank, however many."),
    ] = False,
) -> None:
    """Python stacks of every thread of every rank, grouped by identical stack.

    Exits 1 when ranks wait in a collective (or stalled) while a rank of their group is
    elsewhere, in two looks a second apart, or in one when the waiting ranks' recorders say
    they have waited 5 s: the one-line finding names them.
    """
    from rankscope.cli.output import to_json
    from rankscope.runtime.ask import Selection
    from rankscope.stacks.collect import stack_reports
    from rankscope.stacks.render import render_stacks

    with gc_paused():  # thousands of ranks' answers
        reports = stack_reports(address, Selection(job, group, ranks), deadline_s=deadline)
    if as_json:
        out.print_json(to_json("stacks", reports))
    else:
        for report in reports:
            out.print(render_stacks(report, all_frames=all_frames, show_all=show_all))
    if any(not r.ok for r in reports):
        raise typer.Exit(ExitCode.FINDING)
