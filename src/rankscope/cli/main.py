"""The `rankscope` app: every feature's commands, mounted from one list.

Each feature keeps its commands in its own `cli.py` (a `typer.Typer` named `app`); adding a
feature is one line in `FEATURES`. Ray and torch are imported inside commands, so
`rankscope --help` stays fast. Exit codes are in `rankscope.cli.common.ExitCode`.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

try:  # typer >= 0.2x vendors its own click: its errors are that copy's classes
    from typer._click import echo
    from typer._click.core import Context
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
except ImportError:  # an older typer on plain click
    from click import Context, echo  # type: ignore[assignment]
    from click.exceptions import NoArgsIsHelpError, UsageError  # type: ignore[assignment]

from rankscope._version import __version__
from rankscope.alerts import cli as alerts
from rankscope.ckpt import cli as ckpt
from rankscope.cli.common import one_line, out, set_debug
from rankscope.debug import cli as debug
from rankscope.demo import cli as demo
from rankscope.doctor import cli as doctor
from rankscope.events import cli as events
from rankscope.hang import cli as hang
from rankscope.levels import cli as levels
from rankscope.logs import cli as logs
from rankscope.memory import cli as memory
from rankscope.monitor import cli as monitor
from rankscope.report import cli as report
from rankscope.resources import cli as resources
from rankscope.stacks import cli as stacks
from rankscope.status import cli as status
from rankscope.trace import cli as trace

FEATURES: list[tuple[typer.Typer, str | None, str | None]] = [
    # (the feature's commands, group name or None for top-level commands, group help)
    (stacks.app, None, None),
    (hang.app, None, None),
    (status.app, None, None),
    (events.app, None, None),
    (doctor.app, None, None),
    (demo.app, None, None),
    (memory.app, None, None),
    (resources.app, None, None),
    (monitor.app, None, None),
    (logs.app, None, None),
    (alerts.app, None, None),
    (levels.app, None, None),
    (report.app, None, None),
    (trace.app, None, None),
    (ckpt.app, "ckpt", "Checkpoints: inspect, diff, convert HF <-> mcore."),
    (debug.app, "debug", "Debug sessions: list paused ranks, attach to one."),
]


class _OneLineUsageError(UsageError):
    """Click's usage error (a bad option value, an unknown flag) as one line, exit code 2."""

    def show(self, file: Any = None) -> None:
        where = self.ctx.command_path if self.ctx is not None else "rankscope"
        message = one_line(self.format_message())
        echo(f"rankscope: error: {message} (see `{where} --help`)", err=True)


class _Commands(TyperGroup):
    """The root group: bad arguments anywhere below it come out as one line, not a usage page."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: Context | None = None,
        **extra: Any,
    ) -> Context:  # fmt: skip
        try:
            return super().make_context(info_name, args, parent, **extra)
        except (NoArgsIsHelpError, _OneLineUsageError):
            raise
        except UsageError as exc:
            raise _OneLineUsageError(exc.format_message(), exc.ctx) from None

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except (NoArgsIsHelpError, _OneLineUsageError):
            raise
        except UsageError as exc:
            raise _OneLineUsageError(exc.format_message(), exc.ctx) from None


app = typer.Typer(
    cls=_Commands,
    add_completion=False,
    no_args_is_help=True,
    help="Find what is wrong in distributed training on Ray: hangs, stragglers, dead ranks.",
    pretty_exceptions_enable=False,
    # Plain help: typer 0.29's rich help panel prints every option's type, flags too
    # (`--json <bool>`, even `--help <bool>`); the plain formatter shows flags as flags.
    rich_markup_mode=None,
)
for feature_app, group, group_help in FEATURES:
    if group is None:
        app.add_typer(feature_app)
    else:
        app.add_typer(feature_app, name=group, help=group_help)


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
    set_debug(debug)


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
