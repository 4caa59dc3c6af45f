"""`rankscope` commands: thin wrappers that parse, load, analyze and print.

Exit codes: 0 all well, 1 a finding (a dead or unresponsive rank, a hang), 2 bad input or
nothing to talk to. Errors a user can fix print one line; tracebacks only with --debug.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from rankscope._version import __version__
from rankscope.cli.ckpt import app as ckpt_app
from rankscope.cli.debug import app as debug_app
from rankscope.errors import UserError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Find what is wrong in distributed training on Ray: hangs, stragglers, dead ranks.",
    pretty_exceptions_enable=False,
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)
_state = {"debug": False}

F = TypeVar("F", bound=Callable[..., Any])

Address = Annotated[
    str | None,
    typer.Option("--address", help="Ray cluster HOST:PORT (default: RAY_ADDRESS, or local)."),
]
Job = Annotated[str | None, typer.Option("--job", help="Ray job id (default: jobs still running).")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def user_errors_exit_2(fn: F) -> F:
    """One line and exit 2 for mistakes a user can fix; a traceback only with --debug."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except UserError as exc:
            if _state["debug"]:
                raise
            err.print(f"rankscope: error: {exc}", markup=False)
            raise typer.Exit(2) from None
        except Exception as exc:
            if _state["debug"]:
                raise
            err.print(
                f"rankscope: internal error: {type(exc).__name__}: {exc} "
                "(rerun with --debug for the traceback)",
                markup=False,
            )
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def _version_callback(value: bool) -> None:
    if value:
        out.print(f"rankscope {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version_callback, is_eager=True)
    ] = False,
) -> None:
    _state["debug"] = debug


@app.command()
@user_errors_exit_2
def stacks(
    address: Address = None,
    job: Job = None,
    ranks: Annotated[
        str | None, typer.Option("--ranks", help="Only these ranks, e.g. 0,3-5.")
    ] = None,
    as_json: Json = False,
    deadline: Annotated[
        float, typer.Option("--deadline", help="Seconds to wait for probes before py-spy.")
    ] = 2.0,
    all_frames: Annotated[
        bool, typer.Option("--all-frames", help="Do not fold library frames.")
    ] = False,
) -> None:
    """Python stacks of every thread of every rank, grouped by identical stack."""
    from rankscope.cli import commands

    reports = commands.stacks(address, job, ranks, deadline)
    if as_json:
        out.print_json(commands.json_of("stacks", reports))
        return
    for report in reports:
        out.print(commands.render_stacks(report, all_frames=all_frames))


@app.command()
@user_errors_exit_2
def hang(
    address: Address = None,
    job: Job = None,
    as_json: Json = False,
    min_wait: Annotated[
        float,
        typer.Option("--min-wait", help="Seconds in one collective before it counts as stuck."),
    ] = 5.0,
) -> None:
    """Which rank hangs, in which collective, and where: collectives aligned across ranks."""
    from rankscope.cli import commands

    reports = commands.hang(address, job, min_wait)
    if as_json:
        out.print_json(commands.json_of("hang", reports))
    else:
        for report in reports:
            out.print(commands.render_hang(report))
    if any(not r.ok for r in reports):
        raise typer.Exit(1)


@app.command()
@user_errors_exit_2
def status(address: Address = None, job: Job = None, as_json: Json = False) -> None:
    """Every registered process: rank, node, pid, actor, state, last heartbeat, version."""
    from rankscope.cli import commands

    jobs, deaths = commands.status(address, job)
    if as_json:
        data = {
            job_id: {
                "processes": probes,
                "deaths": {
                    p.info.probe_id: deaths[p.info.probe_id]
                    for p in probes
                    if p.info.probe_id in deaths
                },
            }
            for job_id, probes in jobs.items()
        }
        out.print_json(commands.json_of("status", data))
    else:
        for job_id, probes in jobs.items():
            out.print(commands.render_status(job_id, probes, deaths))
    if commands.any_lost(jobs):
        raise typer.Exit(1)


@app.command()
@user_errors_exit_2
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
    from rankscope.cli.events import show_events

    raise typer.Exit(show_events(address, job, kind or None, limit, as_json, out))


@app.command()
@user_errors_exit_2
def diagnose(
    address: Address = None,
    job: Job = None,
    mode: Annotated[
        str | None, typer.Option("--mode", help="A deeper check: memory_profile.")
    ] = None,
    check_debug_ports: Annotated[
        bool,
        typer.Option("--check-debug-ports", help="Check every debug session's port."),
    ] = False,
    as_json: Json = False,
) -> None:
    """Cluster self-checks: environment, memory of every rank, debug ports."""
    from rankscope.cli.diagnose import run

    raise typer.Exit(
        run(
            address=address,
            job=job,
            mode=mode,
            check_debug_ports=check_debug_ports,
            as_json=as_json,
            console=out,
        )
    )


@app.command()
@user_errors_exit_2
def demo(
    fault: Annotated[
        str, typer.Option("--fault", help="Fault to inject (see the demo docs): stall, none, ...")
    ] = "stall",
    workers: Annotated[int, typer.Option("--workers", min=2, max=16)] = 4,
    steps: Annotated[int, typer.Option("--steps", min=1)] = 30,
) -> None:
    """Run a small 4-rank data-parallel job on a local Ray cluster and debug it."""
    from rankscope.demo.run import run_demo

    raise typer.Exit(run_demo(fault=fault, workers=workers, steps=steps, console=out))


@app.command()
@user_errors_exit_2
def memory(
    address: Address = None,
    job: Job = None,
    watch: Annotated[
        bool, typer.Option("--watch", help="Refresh every 2s until Ctrl-C; adds a leak trend.")
    ] = False,
    as_json: Json = False,
) -> None:
    """Every rank's host and GPU memory, least headroom first, with alerts and leaks."""
    from rankscope.memory.cluster import run_memory

    raise typer.Exit(run_memory(address, job, watch=watch, as_json=as_json, console=out))


# Feature command groups (sub-apps) are added here, one line each.
app.add_typer(ckpt_app, name="ckpt", help="Checkpoints: inspect, diff, convert HF <-> mcore.")
app.add_typer(debug_app, name="debug", help="Debug sessions: list paused ranks, attach to one.")


def main() -> None:
    try:
        app(prog_name="rankscope")
    except SystemExit as exc:
        _exit(exc.code)
    _exit(0)


def _exit(code: object) -> None:
    """Leave without Ray's driver shutdown (a quarter second) when we only came to ask.

    The cluster notices the finished driver by itself; nothing of the job is touched.
    """
    status = code if isinstance(code, int) else (0 if code is None else 1)
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":
    main()
