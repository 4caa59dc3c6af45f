"""`rankscope debug list | attach`: every paused rank across the cluster, and a terminal into one.

Exit codes: 0 ok, 2 bad input (no cluster, no such session). Ray is imported only inside
commands, so `rankscope --help` stays fast.
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from rankscope.cli.common import Address, Job, Json, err, handle_errors, out

if TYPE_CHECKING:
    from rankscope.debug.model import AttachRoute, DebugSession

app = typer.Typer(no_args_is_help=True, add_completion=False)


@app.command("list")
@handle_errors
def list_command(
    address: Address = None,
    job: Job = None,
    as_json: Json = False,
) -> None:
    """Every open debug session: rank, node, pid, where it stopped, and how to attach."""
    from rankscope.cli.output import to_json
    from rankscope.debug.collect import debug_list
    from rankscope.debug.render import render_sessions
    from rankscope.runtime.ask import Selection

    found = debug_list(address, Selection(job))
    if as_json:
        out.print_json(to_json("debug-list", found))
        return
    if not found.jobs:
        out.print("no registered processes, so no debug sessions")
    for listing in found.jobs:
        out.print(render_sessions(listing, found.routes))


@app.command("attach")
@handle_errors
def attach_command(
    session_id: Annotated[str, typer.Argument(help="Session id from `rankscope debug list`.")],
    address: Address = None,
) -> None:
    """Connect this terminal to a paused session (pdb: p, pp, n, s, c, w, u, d, l, interact)."""
    from rankscope.debug.analysis import attach_route
    from rankscope.debug.cli_attach import connect, enable_line_editing, run_terminal
    from rankscope.debug.collect import find_session, here_node_id

    session = find_session(address, session_id)
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
    with contextlib.redirect_stdout(out.file):  # input() edits lines on the terminal only
        run_terminal(conn, session.token, sys.stdout)


def _forward_debugpy(session: DebugSession, route: AttachRoute) -> None:
    from rankscope.debug.analysis import vscode_launch
    from rankscope.debug.cli_attach import PortForward

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
