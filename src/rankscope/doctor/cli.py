"""`rankscope diagnose` (a live job's ranks) and `rankscope doctor` (every node, before launch).

    rankscope diagnose                        environment of every registered process
    rankscope diagnose --mode memory_profile  memory snapshot of every rank (rankscope.memory)
    rankscope diagnose --check-debug-ports    debug sessions' ports (rankscope.debug)

Each check is a function `(address, job, as_json, console) -> exit code` in its feature package;
`_check` imports the one asked for (only then: start-up time), by name, so grep, mypy and the
import test follow it.
"""

from __future__ import annotations

from typing import Annotated, Protocol

import typer
from rich.console import Console

from rankscope.cli.common import Address, ExitCode, Job, Json, handle_errors, out, over_zero
from rankscope.errors import UserError

app = typer.Typer()

MODES = ("memory_profile",)
"""The deeper checks `--mode` picks."""


class Check(Protocol):
    def __call__(
        self, address: str | None, job: str | None, as_json: bool, console: Console
    ) -> int: ...


@app.command()
@handle_errors
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
    """A live job's ranks: environment, memory of every rank, debug ports.

    Asks the probes of a running job (processes that called rankscope.init or were started with
    the setup hook) and compares the ranks of each group. `rankscope doctor` instead checks
    every node of the cluster before (or during) a job, with no probe: versions, GPUs,
    /dev/shm, disks, shared file system, clocks, NCCL variables, Ray; `doctor --config`
    lints a trainer config and predicts memory per GPU.
    """
    if mode is not None and mode not in MODES:
        raise UserError(f"--mode {mode!r}: choose one of {', '.join(sorted(MODES))}")
    raise typer.Exit(_check(mode, check_debug_ports)(address, job, as_json, out))


def _check(mode: str | None, check_debug_ports: bool) -> Check:
    """The check asked for: debug ports, a `--mode`, else every rank's environment."""
    if check_debug_ports:
        from rankscope.debug.cli_diagnose import check_debug_ports as debug_ports

        return debug_ports
    if mode == "memory_profile":
        from rankscope.memory.cli_diagnose import memory_profile

        return memory_profile
    return check_environment


def check_environment(address: str | None, job: str | None, as_json: bool, console: Console) -> int:
    """Every rank's environment, and what differs between them; exit 1 on a difference."""
    from rankscope.cli.output import to_json
    from rankscope.doctor.collect import diagnose_environments
    from rankscope.doctor.render import render_environment
    from rankscope.runtime.ask import Selection

    diagnosis = diagnose_environments(address, Selection(job))
    if as_json:
        console.print_json(to_json("diagnose", diagnosis))
    else:
        for r in diagnosis.jobs:
            console.print(render_environment(r))
        for path in diagnosis.saved:
            console.print(f"[dim]saved for `rankscope report` in {path}[/dim]")
    return ExitCode.FINDING if any(r.findings for r in diagnosis.jobs) else ExitCode.OK


@app.command()
@handle_errors
def doctor(
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="key=value overrides of --config, as verl's command line takes them."),
    ] = None,
    address: Address = None,
    shared_path: Annotated[
        str | None,
        typer.Option(
            "--shared-path",
            help="A directory every node must share: a sentinel written on the head is read "
            "back on every node (default with --config: trainer.default_local_dir).",
        ),
    ] = None,
    runtime_env: Annotated[
        str | None,
        typer.Option(
            "--runtime-env",
            help="A YAML/JSON runtime_env (pip, uv, conda, container, env_vars): the checks run "
            "in the job's environment, not the CLI's.",
        ),
    ] = None,
    deadline: Annotated[
        float,
        typer.Option("--deadline", callback=over_zero, help="Seconds to wait for every node."),
    ] = 30.0,
    min_driver: Annotated[
        str, typer.Option("--min-driver", help="Lowest GPU driver version that passes.")
    ] = "525.60.11",
    config: Annotated[
        str | None,
        typer.Option(
            "--config", help="Lint a verl-style trainer YAML and estimate memory per GPU."
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="The model's folder or config.json (default: from --config)."),
    ] = None,
    gpu_memory: Annotated[
        float | None,
        typer.Option(
            "--gpu-memory",
            callback=over_zero,
            help="GiB per GPU (default: the cluster's, with --address).",
        ),
    ] = None,
    as_json: Json = False,
    html: Annotated[
        str | None, typer.Option("--html", help="Also write the report as one HTML file.")
    ] = None,
) -> None:
    """Preflight: every alive node checked, or a trainer config linted, before launching.

    Exit 0 all well, 1 a check failed, 2 bad input. Unlike `diagnose`, which asks a live job's
    ranks, `doctor` needs no probe: a Ray task pinned to every node reports on it.
    """
    if config is not None:
        from rankscope.doctor.config_lint.cli import lint_command

        code = lint_command(
            config,
            overrides or [],
            model=model,
            gpu_memory_gib=gpu_memory,
            address=address,
            as_json=as_json,
            html=html,
            console=out,
        )
        raise typer.Exit(code)
    if overrides:
        raise UserError(f"{overrides[0]!r}: key=value overrides need --config FILE")
    from rankscope.doctor.preflight.cli import preflight_command

    raise typer.Exit(
        preflight_command(
            address=address,
            shared_path=shared_path,
            runtime_env=runtime_env,
            deadline=deadline,
            min_driver=min_driver,
            as_json=as_json,
            html=html,
            console=out,
        )
    )
