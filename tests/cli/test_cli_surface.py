"""Freezes the CLI surface: commands and flags do not grow or vanish by accident."""

from __future__ import annotations

import typer.main

import rankscope.cli.main as cli

EXPECTED = {
    "comm-bench": {"--address", "--nodes", "--live", "--budget", "--max-bytes", "--json"},
    "monitor": {"--address", "--job", "--group", "--json"},
    "top": {"--address", "--job", "--group", "--json", "--once"},
    "stacks": {
        "--address",
        "--job",
        "--group",
        "--ranks",
        "--json",
        "--deadline",
        "--all-frames",
        "--all",
    },
    "status": {"--address", "--job", "--group", "--json", "--all"},
    "hang": {"--address", "--job", "--group", "--json", "--min-wait", "--all"},
    "events": {"--address", "--job", "--kind", "--limit", "--json"},
    "demo": {"--fault", "--workers", "--steps", "--client"},
    "memory": {"--address", "--job", "--group", "--watch", "--by-gpu", "--json"},
    "why-pending": {"--address", "--json"},
    "plan": {
        "--gpus-per-worker",
        "--cpus-per-worker",
        "--min-gpu-memory",
        "--prefer",
        "--fallback",
        "--address",
        "--json",
    },
    "diagnose": {"--address", "--job", "--mode", "--check-debug-ports", "--json"},
    "doctor": {
        "--address",
        "--shared-path",
        "--runtime-env",
        "--deadline",
        "--min-driver",
        "--config",
        "--model",
        "--gpu-memory",
        "--json",
        "--html",
    },
    "report": {"--address", "--job", "--output", "--open", "--json"},
    "logs": {
        "--address",
        "--job",
        "--ranks",
        "--level",
        "--grep",
        "--since",
        "--raw",
        "--follow",
        "--json",
    },
    "alerts": {"--address", "--job", "--ack", "--json"},
    "level": {"--address", "--job", "--group", "--ranks", "--sample-every", "--for", "--json"},
    "trace": {
        "--address",
        "--job",
        "--group",
        "--duration",
        "--ranks",
        "--output",
        "--torch-profiler",
        "--steps",
        "--budget-mb",
        "--json",
    },
    "ckpt": set(),  # a group: frozen in test_ckpt_cli.py
    "debug": set(),  # a group: `debug list` and `debug attach`, frozen in test_debug_local.py
}


def _surface() -> dict[str, set[str]]:
    group = typer.main.get_command(cli.app)
    return {
        name: {opt for p in command.params for opt in p.opts if opt.startswith("--")}
        for name, command in group.commands.items()  # type: ignore[attr-defined]
    }


def test_cli_surface_is_frozen():
    assert _surface() == EXPECTED


def test_root_flags():
    group = typer.main.get_command(cli.app)
    assert {o for p in group.params for o in p.opts} == {"--debug", "--version"}


def _commands(group: object) -> list[object]:
    found = []
    for command in group.commands.values():  # type: ignore[attr-defined]
        found.extend(_commands(command) if hasattr(command, "commands") else [command])
    return found


def test_every_command_keeps_the_exit_code_contract():
    """Every command goes through `handle_errors`: exit 2 for the user, 3 for our bugs."""
    from rankscope.cli.common import handle_errors

    guard = handle_errors(lambda: None).__code__  # every guarded command runs this code

    def guarded(fn: object) -> bool:
        while fn is not None:
            if getattr(fn, "__code__", None) is guard:
                return True
            fn = getattr(fn, "__wrapped__", None)
        return False

    commands = _commands(typer.main.get_command(cli.app))
    assert len(commands) >= len(EXPECTED)
    assert [c.name for c in commands if not guarded(c.callback)] == []  # type: ignore[attr-defined]


def test_internal_error_exits_3_and_says_how_to_see_the_traceback():
    from typer.testing import CliRunner

    from rankscope.cli.common import ExitCode, handle_errors
    from rankscope.errors import UserError

    app = typer.Typer()

    @app.command()
    @handle_errors
    def broken(user: bool = False) -> None:
        if user:
            raise UserError("--thing 7: must be even; pass 8")
        raise KeyError("probe_id")

    internal = CliRunner().invoke(app, [])
    assert internal.exit_code == ExitCode.INTERNAL == 3
    assert internal.output.strip() == (
        "rankscope: internal error: KeyError: 'probe_id' (rerun with --debug for the traceback)"
    )
    user = CliRunner().invoke(app, ["--user"])
    assert user.exit_code == ExitCode.BAD_INPUT == 2
    assert user.output.strip() == "rankscope: error: --thing 7: must be even; pass 8"


def _command_paths(group: object, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [prefix]
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        if hasattr(command, "commands"):
            paths.extend(_command_paths(command, (*prefix, name)))
        else:
            paths.append((*prefix, name))
    return paths


def test_help_shows_flags_as_flags_and_values_with_their_type():
    """A flag takes no value: `--json  Print JSON ...`, never `--json <bool>`."""
    import re

    from typer.testing import CliRunner

    paths = _command_paths(typer.main.get_command(cli.app))
    helps = {p: CliRunner().invoke(cli.app, [*p, "--help"], terminal_width=100) for p in paths}
    for path, result in helps.items():
        assert result.exit_code == 0, (path, result.output)
        assert "<bool>" not in result.output, (path, result.output)
    assert re.search(r"^  --debug +Show tracebacks\.$", helps[()].output, re.M)
    assert re.search(r"^  --help +Show this message and exit\.$", helps[()].output, re.M)
    stacks = helps[("stacks",)].output
    assert re.search(r"^  --json +Print JSON instead of tables\.$", stacks, re.M)
    assert re.search(r"^  --all-frames +Do not fold library frames\.$", stacks, re.M)
    assert re.search(r"^  --deadline <float> +Seconds to wait", stacks, re.M)
    diagnose = helps[("diagnose",)].output
    assert re.search(r"^  --check-debug-ports +Check every debug session's port\.$", diagnose, re.M)
