"""Freezes the CLI surface: commands and flags do not grow or vanish by accident."""

from __future__ import annotations

import typer.main

import rankscope.cli.main as cli

EXPECTED = {
    "stacks": {"--address", "--job", "--ranks", "--json", "--deadline", "--all-frames"},
    "status": {"--address", "--job", "--json"},
    "hang": {"--address", "--job", "--json", "--min-wait"},
    "events": {"--address", "--job", "--kind", "--limit", "--json"},
    "demo": {"--fault", "--workers", "--steps"},
    "memory": {"--address", "--job", "--watch", "--json"},
    "diagnose": {"--address", "--job", "--mode", "--check-debug-ports", "--json"},
    "debug": set(),  # a group: `debug list` and `debug attach`, frozen in test_debug_local.py
}


def _surface() -> dict[str, set[str]]:
    group = typer.main.get_command(cli.app)
    return {
        name: {opt for p in command.params for opt in p.opts if opt.startswith("--")}
        for name, command in group.commands.items()  # type: ignore[attr-defined]
        if name in EXPECTED
    }


def test_cli_surface_is_frozen():
    assert _surface() == EXPECTED


def test_root_flags():
    group = typer.main.get_command(cli.app)
    assert {o for p in group.params for o in p.opts} == {"--debug", "--version"}
