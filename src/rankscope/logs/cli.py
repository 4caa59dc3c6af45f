"""`rankscope logs`: every rank's log lines, merged in time order and folded across ranks."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from rankscope.cli.common import Address, Job, Json, handle_errors, out

app = typer.Typer()


@app.command()
@handle_errors
def logs(
    address: Address = None,
    job: Job = None,
    ranks: Annotated[str | None, typer.Option("--ranks", help="Only these ranks: 0,3-5.")] = None,
    level: Annotated[
        str | None, typer.Option("--level", help="At least this level: DEBUG..CRITICAL.")
    ] = None,
    grep: Annotated[str | None, typer.Option("--grep", help="Only lines matching REGEX.")] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Only the last DURATION: 30s, 10m, 2h.")
    ] = None,
    raw: Annotated[bool, typer.Option("--raw", help="Every line, unfolded.")] = False,
    follow: Annotated[
        bool, typer.Option("--follow", help="Keep printing new lines until interrupted.")
    ] = False,
    as_json: Json = False,
) -> None:
    """Every rank's logs (rankscope's files and Ray's .out/.err), folded across ranks."""
    from rankscope.logs.analysis import LogFilter, parse_duration
    from rankscope.ranks import parse_rank_spec

    rank_set = parse_rank_spec(ranks) if ranks is not None else None
    since_s = parse_duration(since, what="--since") if since is not None else None
    log_filter = LogFilter(rank_set, level, grep, since_s, time.time())
    if follow:
        from rankscope.logs.collect_follow import follow_logs

        follow_logs(address, job, log_filter, as_json=as_json)
        return
    from rankscope.cli.output import to_json
    from rankscope.logs.collect import collect_logs
    from rankscope.logs.render import render_logs
    from rankscope.runtime.ask import Selection

    results = collect_logs(address, Selection(job), log_filter, raw=raw)
    if as_json:
        out.print_json(to_json("logs", results))
        return
    for result in results:
        for text in render_logs(result):
            out.print(text)
