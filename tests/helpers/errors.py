"""Checks that an error a user caused is one clear line with exit code 2, never a traceback."""

from __future__ import annotations

import subprocess

from click.testing import Result


def one_clear_line(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """A `rankscope` subprocess failed with exit 2 and one stderr line holding every fragment."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr  # no C++ warnings from Ray's retries
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def one_line_exit_2(result: Result, *fragments: str) -> str:
    """A command run by typer's CliRunner failed with exit 2 and one `rankscope: error:` line
    holding every fragment; returns that line."""
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.strip().split("\n") if line.startswith("rankscope")]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("rankscope: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]
