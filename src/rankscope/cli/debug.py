"""`rankscope debug list | attach`: every paused rank across the cluster, and a terminal into one.

Exit codes: 0 ok, 2 bad input (no cluster, no such session). Ray is imported only inside
commands, so `rankscope --help` stays fast.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from rankscope.analysis.debug import AttachRoute
    from rankscope.debug.client import SessionListing
    from rankscope.debug.model import DebugSession

app = typer.Typer(no_args_is_help=True, add_completion=False)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

F = TypeVar("F", bound=Callable[..., Any])
Address = Annotated[
    str | None,
    typer.Option("--address", help="Ray cluster HOST:PORT (default: RAY_ADDRESS, or local)."),
]


def _user_errors(fn: F) -> F:
    """`user_errors_exit_2` from main, imported at call time (main imports this module)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from rankscope.cli.main import user_errors_exit_2

        return user_errors_exit_2(fn)(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


@app.command("list")
@_user_errors
def list_command(
    address: Address = None,
    job: Annotated[
        str | None, typer.Option("--job", help="Ray job id (default: jobs still running).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Every open debug session: rank, node, pid, where it stopped, and how to attach."""
    from rankscope.analysis.debug import attach_route, vscode_launch
    from rankscope.cli.render import to_json
    from rankscope.debug.client import here_node_id, list_sessions
    from rankscope.runtime.client import HubClient

    client = HubClient.attach(address)
    listings = list_sessions(client, job)
    here = here_node_id()
    routes = {s.id: attach_route(s, here) for listing in listings for s in listing.sessions}
    if as_json:
        attach = {
            s.id: {
                "command": f"rankscope debug attach {s.id}",
                "tunnel": routes[s.id].tunnel,
                "direct": routes[s.id].direct_command,
                "vscode": vscode_launch(s) if s.backend == "debugpy" else None,
            }
            for listing in listings
            for s in listing.sessions
        }
        out.print_json(to_json("debug-list", {"jobs": listings, "attach": attach}))
        return
    if not listings:
        out.print("no registered processes, so no debug sessions")
    for listing in listings:
        out.print(render_sessions(listing, routes))


def render_sessions(
    listing: SessionListing, routes: dict[str, AttachRoute], now: float | None = None
) -> RenderableType:
    from rankscope.analysis.debug import vscode_launch
    from rankscope.cli.render import ago

    now = time.time() if now is None else now
    count = len(listing.sessions)
    parts: list[RenderableType] = []
    if not count:
        parts.append(Text(f"job {listing.job_id}: no open debug sessions"))
    else:
        table = Table(
            title=f"job {listing.job_id}: {count} open debug session{'s' if count > 1 else ''}",
            title_justify="left",
        )
        for column in ("id", "rank", "node", "pid", "reason", "where", "state", "since"):
            table.add_column(
                column,
                justify="right" if column in ("rank", "pid") else "left",
                no_wrap=column in ("id", "rank", "node", "pid", "since"),
                overflow="fold",
            )
        for s in listing.sessions:
            table.add_row(
                s.id,
                "-" if s.rank is None else str(s.rank),
                s.node_ip or s.hostname,
                str(s.pid),
                s.reason + (f" ({s.exception})" if s.exception else ""),
                f"{s.location} {s.function}",
                f"{s.state} ({s.backend})" + (f", {s.refused} refused" if s.refused else ""),
                ago(now, s.since),
            )
        parts.append(table)
    for s in listing.sessions:
        parts.append(_how_to_attach(s, routes[s.id], vscode_launch))
    if listing.unanswered:
        parts.append(
            Text(f"no answer in time from: {', '.join(listing.unanswered)}", style="yellow")
        )
    return Group(*parts)


def _how_to_attach(
    s: DebugSession, route: AttachRoute, vscode_launch: Callable[[DebugSession], dict[str, Any]]
) -> RenderableType:
    wait = "forever" if s.timeout is None else f"{s.timeout:g}s"
    if s.backend == "debugpy":
        config = json.dumps({"configurations": [vscode_launch(s)]}, indent=2)
        where = (
            "from this node"
            if not route.tunnel
            else f"on {s.node_ip or s.hostname}, or from here through "
            f"`rankscope debug attach {s.id}` (forwards a local port)"
        )
        return Group(
            Text(f"\n{s.id} ({s.label}, debugpy, waits {wait}): VS Code launch.json {where}:"),
            Text(config),
        )
    what = f"{s.reason} at {s.location} in {s.function}"
    line = Text(f"\n{s.id} ({s.label}, {what}, waits {wait}): rankscope debug attach {s.id}")
    if route.tunnel:
        line.append(
            f"\n    from here it tunnels through Ray; direct: {route.direct_command}", style="dim"
        )
    return line


@app.command("attach")
@_user_errors
def attach_command(
    session_id: Annotated[str, typer.Argument(help="Session id from `rankscope debug list`.")],
    address: Address = None,
) -> None:
    """Connect this terminal to a paused session (pdb: p, pp, n, s, c, w, u, d, l, interact)."""
    from rankscope.analysis.debug import attach_route
    from rankscope.debug.client import (
        connect,
        enable_line_editing,
        find_session,
        here_node_id,
        run_terminal,
    )
    from rankscope.runtime.client import HubClient

    client = HubClient.attach(address)
    session = find_session(client, session_id)
    route = attach_route(session, here_node_id())
    if session.backend == "debugpy":
        _forward_debugpy(session, route)
        return
    via = "through a Ray tunnel" if route.tunnel else f"at {route.host}:{route.port}"
    err.print(
        f"rankscope: attaching to {session.label} (pid {session.pid} on "
        f"{session.node_ip or session.hostname}) {via}",
        markup=False,
    )
    if route.tunnel:
        err.print(f"rankscope: direct instead: {route.direct_command}", markup=False)
    conn = connect(session, route)
    enable_line_editing()
    run_terminal(conn, session.token, sys.stdout)


def _forward_debugpy(session: DebugSession, route: AttachRoute) -> None:
    from rankscope.analysis.debug import vscode_launch
    from rankscope.debug.client import PortForward

    if not route.tunnel:
        config = json.dumps({"configurations": [vscode_launch(session)]}, indent=2)
        out.print(
            f"{session.id} is a debugpy session; attach VS Code with:\n{config}", markup=False
        )
        return
    forward = PortForward(session, route)
    config = json.dumps(
        {"configurations": [vscode_launch(session, host="127.0.0.1", port=forward.port)]}, indent=2
    )
    out.print(
        f"forwarding 127.0.0.1:{forward.port} to {session.id} on {session.node_ip} through Ray "
        f"(Ctrl-C stops); attach VS Code with:\n{config}",
        markup=False,
    )
    with contextlib.suppress(KeyboardInterrupt):
        forward.serve_forever()
