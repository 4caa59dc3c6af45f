"""Debug sessions as a terminal shows them: a table, then how to attach to each."""

from __future__ import annotations

import json
import time

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from rankscope.debug.analysis import FINDINGS, PortCheck, vscode_launch
from rankscope.debug.model import AttachRoute, DebugSession, SessionListing
from rankscope.units import ago

__all__ = ["render_port_checks", "render_sessions"]


def render_sessions(
    listing: SessionListing, routes: dict[str, AttachRoute], now: float | None = None
) -> RenderableType:
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
        parts.append(_how_to_attach(s, routes[s.id]))
    if listing.unanswered:
        parts.append(
            Text(f"no answer in time from: {', '.join(listing.unanswered)}", style="yellow")
        )
    return Group(*parts)


DEBUGPY_NO_TOKEN = (
    "    debugpy asks no token: while it waits, any user who can reach its port on that node "
    "(127.0.0.1 only) can attach and run code as the job's user; rankscope's own sessions "
    "(pdb) need a one-time token"
)


def _how_to_attach(s: DebugSession, route: AttachRoute) -> RenderableType:
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
            Text(DEBUGPY_NO_TOKEN, style="yellow"),
        )
    what = f"{s.reason} at {s.location} in {s.function}"
    line = Text(f"\n{s.id} ({s.label}, {what}, waits {wait}): rankscope debug attach {s.id}")
    if route.tunnel:
        line.append(
            f"\n    from here it tunnels through Ray; direct: {route.direct_command}", style="dim"
        )
    return line


def render_port_checks(checks: list[PortCheck]) -> Text:
    """One line per session: `id  who  pid@node  endpoint  verdict: detail`."""
    if not checks:
        return Text("no debug sessions are open, and none was left open by a dead process")
    text = Text(f"{len(checks)} debug session{'s' if len(checks) > 1 else ''}:", style="bold")
    for c in checks:
        text.append(f"\n{c.session_id}  {c.label}  pid {c.pid}@{c.node}  {c.endpoint}  ")
        text.append(c.verdict.value, style="red" if c.verdict in FINDINGS else "green")
        text.append(f": {c.detail}")
    return text
