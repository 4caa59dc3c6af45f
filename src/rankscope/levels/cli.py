"""`rankscope level [off|light|full] [--ranks 3] [--for 10m]`: show or switch live ranks."""

from __future__ import annotations

from typing import Annotated

import typer

from rankscope.cli.common import Address, ExitCode, Group, Job, Json, handle_errors, out

app = typer.Typer()


@app.command()
@handle_errors
def level(
    new_level: Annotated[
        str | None, typer.Argument(metavar="[LEVEL]", help="off, light or full; none: show.")
    ] = None,
    address: Address = None,
    job: Job = None,
    group: Group = None,
    ranks: Annotated[str | None, typer.Option("--ranks", help="Only these ranks: 0,3-5.")] = None,
    sample_every: Annotated[
        str | None,
        typer.Option("--sample-every", help="Full-level features on every Nth step only."),
    ] = None,
    for_: Annotated[
        str | None, typer.Option("--for", help="Switch back after DURATION: 30s, 10m.")
    ] = None,
    as_json: Json = False,
) -> None:
    """Each rank's debug level and sampling, or switch live ranks to LEVEL and/or
    --sample-every N (and both back after --for)."""
    from rankscope.cli.output import to_json
    from rankscope.errors import UserError
    from rankscope.level import parse_level, parse_sample_every
    from rankscope.levels.collect import switch_levels
    from rankscope.levels.render import render_levels
    from rankscope.logs.analysis import parse_duration
    from rankscope.runtime.ask import Selection

    chosen = parse_level(new_level, what="level") if new_level is not None else None
    sample = parse_sample_every(sample_every) if sample_every is not None else None
    for_s = parse_duration(for_, what="--for") if for_ is not None else None
    if for_s is not None and chosen is None and sample is None:
        raise UserError(
            "--for needs a LEVEL or --sample-every to switch, e.g. `rankscope level full --for 10m`"
        )
    selection = Selection(job, group, ranks)
    rows = switch_levels(address, selection, level=chosen, for_s=for_s, sample_every=sample)
    if not rows:
        raise UserError("no live process matches (check --ranks, --group and --job)")
    if as_json:
        out.print_json(to_json("level", rows))
    else:
        out.print(render_levels(rows))
    if any(r.state is None for r in rows):
        raise typer.Exit(ExitCode.FINDING)
