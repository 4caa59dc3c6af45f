"""A command's stdout carries its output only: Ray's driver prints the cluster's warnings ("8
PYTHON worker processes have been started on node ...") to sys.stdout from a thread of its own,
at any moment, and a script parsing `--json` must still read JSON."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

COMMAND = textwrap.dedent(
    """
    import typer
    from ray._private.worker import print_to_stdstream

    from rankscope.cli.common import handle_errors, out

    app = typer.Typer()

    @app.command()
    @handle_errors
    def report() -> None:
        warning = "WARNING: 8 PYTHON worker processes have been started on node: n1"
        # what Ray's error listener thread does with a message of the cluster
        print_to_stdstream({"lines": [warning], "pid": "raylet", "is_err": False}, False)
        out.print('{"data": 1}')

    app()
    """
)


def test_ray_s_warnings_go_to_stderr_and_stdout_stays_the_command_s():
    result = subprocess.run(
        [sys.executable, "-c", COMMAND], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"data": 1}
    assert "8 PYTHON worker processes have been started" in result.stderr


def test_the_one_console_on_stdout_is_the_commands_out():
    """A second rich Console on stdout would write where Ray's warnings go while a command runs
    (`handle_errors` binds only `rankscope.cli.common.out` to the command's stdout)."""
    import re
    from pathlib import Path

    import rankscope

    root = Path(rankscope.__file__).parent
    on_stdout = [
        f"{path.relative_to(root)}: {call}"
        for path in sorted(root.rglob("*.py"))
        for call in re.findall(r"\bConsole\([^)]*\)", path.read_text())
        if "stderr=True" not in call and "file=" not in call
    ]
    assert on_stdout == ["cli/common.py: Console(highlight=False, soft_wrap=True)"]
