"""`rankscope trace`: record a window of a live job into one Perfetto trace, and summarize it."""

from __future__ import annotations

import re
from typing import Annotated

import typer

from rankscope.cli.common import Address, ExitCode, Group, Job, Json, handle_errors, out, over_zero
from rankscope.errors import UserError

app = typer.Typer()

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min)?\s*$")
_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, None: 1.0}


def parse_duration(text: str) -> float:
    """`10s`, `500ms`, `2m`, `7.5` (seconds) -> seconds. Example: `parse_duration("2m") == 120`."""
    match = _DURATION.match(text)
    if match is None:
        raise UserError(f"--duration {text!r}: write a number with a unit, e.g. 10s, 500ms, 2m")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


@app.command()
@handle_errors
def trace(
    address: Address = None,
    job: Job = None,
    group: Group = None,
    duration: Annotated[
        str, typer.Option("--duration", help="How long to record, e.g. 10s, 500ms, 2m.")
    ] = "10s",
    ranks: Annotated[
        str | None, typer.Option("--ranks", help="Only these ranks, e.g. 0-3.")
    ] = None,
    output: Annotated[
        str | None,
        typer.Option("-o", "--output", help="Trace file (.json, or .json.gz to compress)."),
    ] = None,
    torch_profiler: Annotated[
        bool,
        typer.Option("--torch-profiler", help="Also run torch.profiler on the chosen ranks."),
    ] = False,
    steps: Annotated[
        int, typer.Option("--steps", help="Steps torch.profiler records (rankscope.step()).")
    ] = 2,
    budget_mb: Annotated[
        float,
        typer.Option(
            "--budget-mb", callback=over_zero, help="Largest trace file; repeated spans sampled."
        ),
    ] = 100.0,
    as_json: Json = False,
) -> None:
    """Record a window of the live job into one Perfetto trace (every rank, clocks aligned).

    Spans, step markers, collectives split into waiting for the last rank and transfer, memory.
    Prints per-rank shares, step times and straggler scores; exits 1 on a straggler or on a
    Ray task pending for over 10 s.
    """
    from rankscope.cli.output import to_json
    from rankscope.runtime.ask import Selection
    from rankscope.trace.collect import record_trace
    from rankscope.trace.render import render_summary

    seconds = parse_duration(duration)
    if steps < 1:
        raise UserError(f"--steps {steps}: give at least 1 step for torch.profiler")
    summary = record_trace(
        address, Selection(job, group, ranks), duration_s=seconds, path=output,
        budget=int(budget_mb * 2**20), torch_profiler_steps=steps if torch_profiler else 0,
    )  # fmt: skip
    if as_json:
        out.print_json(to_json("trace", summary))
    else:
        out.print(render_summary(summary))
    if not summary.ok:
        raise typer.Exit(ExitCode.FINDING)
