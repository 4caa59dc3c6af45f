"""`rankscope monitor` (the findings) and `rankscope top` (the live view of every rank)."""

from __future__ import annotations

import select
import sys
import time
from typing import Annotated

import typer

from rankscope.cli.common import Address, ExitCode, Group, Job, Json, handle_errors, out, over_zero

app = typer.Typer()

REFRESH_S = 1.0


@app.command()
@handle_errors
def monitor(
    address: Address = None, job: Job = None, group: Group = None, as_json: Json = False
) -> None:
    """Training health: stragglers, throughput drift, loss, the first NaN, memory, collectives."""
    from rankscope.cli.output import to_json
    from rankscope.monitor.collect import job_health
    from rankscope.monitor.render import render_health
    from rankscope.runtime.ask import Selection

    jobs = job_health(address, Selection(job, group))
    if as_json:
        out.print_json(to_json("monitor", jobs))
    else:
        for j in jobs:
            out.print(render_health(j))
    raise typer.Exit(ExitCode.FINDING if any(j.findings for j in jobs) else ExitCode.OK)


@app.command()
@handle_errors
def top(
    address: Address = None,
    job: Job = None,
    group: Group = None,
    as_json: Json = False,
    once: Annotated[bool, typer.Option("--once", help="Print one table and exit.")] = False,
) -> None:
    """Every rank live, the worst first (refresh 1 s, q or Ctrl-C to quit); --json: one snapshot."""
    from rich.live import Live

    from rankscope.cli.output import to_json
    from rankscope.monitor.collect import watch_tops
    from rankscope.monitor.render import render_top
    from rankscope.runtime.ask import Selection

    refreshes = watch_tops(address, Selection(job, group))
    if as_json or once:
        jobs = next(refreshes)
        if as_json:
            out.print_json(to_json("top", jobs))
        else:
            out.print(render_top(jobs))
        raise typer.Exit(ExitCode.OK)
    try:
        with Live(console=out, auto_refresh=False, screen=False) as live:
            for jobs in refreshes:
                live.update(render_top(jobs), refresh=True)
                if _quit_within(REFRESH_S):
                    break
    except KeyboardInterrupt:
        pass
    raise typer.Exit(ExitCode.OK)


@app.command("comm-bench")
@handle_errors
def comm_bench(
    address: Address = None,
    nodes: Annotated[
        str | None, typer.Option("--nodes", help="Node IPs, comma-separated (default: all).")
    ] = None,
    live: Annotated[
        bool, typer.Option("--live", help="Run on nodes a live job uses (it shares them).")
    ] = False,
    budget: Annotated[
        float,
        typer.Option(
            "--budget", callback=over_zero, help="Seconds for the collective sweep (default 20)."
        ),
    ] = 20.0,
    max_bytes: Annotated[
        int, typer.Option("--max-bytes", help="Largest message (default 256 MiB).")
    ] = 256 << 20,
    as_json: Json = False,
) -> None:
    """Preflight: collective bus bandwidth and node-pair links (exit 1 on a 2x slow pair)."""
    from rankscope.cli.output import to_json
    from rankscope.errors import UserError
    from rankscope.monitor.collect_commbench import run_comm_bench
    from rankscope.monitor.render import render_comm_bench

    if max_bytes < 1024:  # --budget is checked as it is read (`over_zero`)
        raise UserError(f"--max-bytes ({max_bytes}) must be >= 1024")
    chosen = [n.strip() for n in nodes.split(",") if n.strip()] if nodes else None
    bench = run_comm_bench(address, nodes=chosen, live=live, budget_s=budget, max_bytes=max_bytes)
    if as_json:
        out.print_json(to_json("comm-bench", bench))
    else:
        out.print(render_comm_bench(bench))
    raise typer.Exit(ExitCode.FINDING if bench.slow_pairs else ExitCode.OK)


def _quit_within(seconds: float) -> bool:
    """Wait up to `seconds`; True when the user typed q (Ctrl-C ends it too)."""
    if not sys.stdin.isatty():
        time.sleep(seconds)
        return False
    import termios
    import tty

    fd = sys.stdin.fileno()
    old = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        ready, _, _ = select.select([sys.stdin], [], [], seconds)
        return bool(ready) and sys.stdin.read(1).lower() == "q"
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)
