"""`rankscope report`: one self-contained HTML page for a whole job."""

from __future__ import annotations

from typing import Annotated

import typer

from rankscope.cli.common import Address, ExitCode, Job, Json, handle_errors, out

app = typer.Typer()


@app.command()
@handle_errors
def report(
    run_dir: Annotated[
        str | None,
        typer.Argument(
            help="A run directory (<run_dir>/<job>/, or the <run_dir> above it); "
            "default: ask the hub, with a live snapshot of the job."
        ),
    ] = None,
    address: Address = None,
    job: Job = None,
    output: Annotated[
        str | None,
        typer.Option(
            "-o", "--output", help="HTML file to write [default: rankscope-report-<job>.html]."
        ),
    ] = None,
    open_page: Annotated[bool, typer.Option("--open", help="Open the page in a browser.")] = False,
    as_json: Json = False,
) -> None:
    """What went wrong in a run, on one page: verdict, timeline, ranks, hangs, memory, ..."""
    import gc
    import time

    from rankscope.cli.output import to_json
    from rankscope.report.analysis import build_report
    from rankscope.report.collect import collect_run
    from rankscope.report.render import render_summary, write_html

    # ~1M objects at 4,096 ranks, no cycles: collection would be 30% of it, and every import
    # while they live (jinja2 when writing) would walk them all once more
    gc.disable()
    try:
        data = collect_run(run_dir, address, job)
        result = build_report(data, time.time())
        if as_json:
            out.print_json(to_json("report", result))
        else:
            path = write_html(result, output or f"rankscope-report-{result.job_id}.html")
            out.print(render_summary(result, path))
            if open_page:
                import webbrowser

                webbrowser.open(f"file://{path}")
    finally:
        gc.enable()
    if not result.ok:
        raise typer.Exit(ExitCode.FINDING)
