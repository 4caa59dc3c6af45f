"""What every feature's commands share: consoles, options, exit codes and error handling.

Exit codes: 0 all well, 1 a finding (a dead or stuck rank, a leak, a mismatch), 2 bad input or
nothing to talk to, 3 an internal error (a bug in rankscope: rerun with --debug for the
traceback). Errors a user can fix print one line; tracebacks only with --debug.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import gc
import math
import sys
from collections.abc import Callable, Iterator
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from rankscope.errors import UserError

__all__ = [
    "Address",
    "ExitCode",
    "Group",
    "Job",
    "Json",
    "err",
    "handle_errors",
    "one_line",
    "out",
    "set_debug",
]

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

F = TypeVar("F", bound=Callable[..., Any])

Address = Annotated[
    str | None,
    typer.Option("--address", help="Ray cluster HOST:PORT (default: RAY_ADDRESS, or local)."),
]
Job = Annotated[str | None, typer.Option("--job", help="Ray job id (default: jobs still running).")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
Group = Annotated[
    str | None,
    typer.Option(
        "--group", help="Only this group of ranks (its rendezvous HOST:PORT, or a prefix of it)."
    ),
]


def over_zero(value: float | None) -> float | None:
    """An option's callback: a finite number over 0 (seconds, sizes), refused as it is read."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"{value:g}: give a finite number over 0")
    return value


def zero_or_more(value: float | None) -> float | None:
    """An option's callback: a finite number, 0 or more (thresholds, shares)."""
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise typer.BadParameter(f"{value:g}: give a finite number, 0 or more")
    return value


class ExitCode(enum.IntEnum):
    """The process exit codes every command keeps to."""

    OK = 0
    """All well."""
    FINDING = 1
    """Something is wrong in the job: a dead or stuck rank, a leak, a mismatch."""
    BAD_INPUT = 2
    """A mistake the user can fix, or nothing to talk to."""
    INTERNAL = 3
    """A bug in rankscope; --debug shows the traceback."""


_state = {"debug": False, "stdout_bound": False}


def set_debug(debug: bool) -> None:
    """`--debug`: let exceptions through with their traceback."""
    _state["debug"] = debug


_LINE_BREAKS = dict.fromkeys(map(ord, "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"))


def one_line(text: str) -> str:
    """`text` on one terminal line: line breaks (in a path or a value the user typed) escaped."""
    if not any(ord(c) in _LINE_BREAKS for c in text):
        return text
    return "".join(repr(c)[1:-1] if ord(c) in _LINE_BREAKS else c for c in text)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while a command reads thousands of ranks'
    answers: each unpickles into many objects, and every collection their creation sets off
    rescans all that is alive (at 4,096 ranks about half of `hang`'s CPU). Only around a
    one-shot read in the CLI's short-lived process, never in a loop or in the job."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def _stdout_for_output_only() -> Iterator[None]:
    """While a command runs, stdout carries its output only (`out`), and whatever else writes to
    sys.stdout goes to stderr: Ray's driver prints the cluster's warnings ("8 PYTHON worker
    processes have been started on node ...") to sys.stdout from a thread of its own, which
    broke `--json` for the script reading it. A command run inside another keeps the outer's."""
    if _state["stdout_bound"]:
        yield
        return
    out.file, _state["stdout_bound"] = sys.stdout, True
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _state["stdout_bound"] = False
        out.file = None  # type: ignore[assignment]  # rich: None is sys.stdout, looked up each write


def handle_errors(fn: F) -> F:
    """One line and exit 2 for mistakes a user can fix, exit 3 for our own bugs.

    Example: `@app.command()` above `@handle_errors` above the command function.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with _stdout_for_output_only():
                return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except UserError as exc:
            if _state["debug"]:
                raise
            err.print(f"rankscope: error: {one_line(str(exc))}", markup=False)
            raise typer.Exit(ExitCode.BAD_INPUT) from None
        except Exception as exc:
            if _state["debug"]:
                raise
            if isinstance(exc, OSError) and exc.filename is not None:  # a path the user gave
                why = one_line(f"{exc.filename}: {exc.strerror or exc}")
                err.print(f"rankscope: error: {why}", markup=False)
                raise typer.Exit(ExitCode.BAD_INPUT) from None
            err.print(
                f"rankscope: internal error: {type(exc).__name__}: {one_line(str(exc))} "
                "(rerun with --debug for the traceback)",
                markup=False,
            )
            raise typer.Exit(ExitCode.INTERNAL) from None

    return wrapper  # type: ignore[return-value]
