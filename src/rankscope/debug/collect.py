"""Debug sessions cluster-wide: ask every live probe which sessions it holds open."""

from __future__ import annotations

from rankscope.debug.analysis import attach_route, select_session, vscode_launch
from rankscope.debug.model import AttachCommands, DebugList, DebugSession, SessionListing
from rankscope.runtime import deadlines
from rankscope.runtime.ask import Command, Selection, ask_one
from rankscope.runtime.client import HubClient
from rankscope.runtime.selection import select_jobs

__all__ = ["debug_list", "find_session", "here_node_id", "list_sessions"]


def list_sessions(
    address: str | None,
    selection: Selection,
    *,
    with_token: bool = False,
    client: HubClient | None = None,
    deadline_s: float = deadlines.DEBUG_SESSIONS_S,
) -> list[SessionListing]:
    """Ask every live probe of the selected jobs for its open sessions. No registered process
    is no listing, not an error: `debug list` says so."""
    client = client or HubClient.attach(address)
    sessions_of = Command("debug_sessions", {"with_token": with_token})
    listings = []
    for job_id, probes in select_jobs(client.probes(), selection.job).items():
        answers = ask_one(client, probes, sessions_of, deadline_s)
        sessions = [s for _, reply in answers.answered for s in reply.payload]
        sessions.sort(key=lambda s: (s.rank is None, s.rank or 0, s.pid, s.since))
        listings.append(
            SessionListing(
                job_id,
                tuple(sessions),
                tuple(p.context.label for p in answers.silent),
                tuple(p.info.probe_id for p in answers.silent),
                tuple(p.info.probe_id for p in answers.dead),
            )
        )
    return listings


def debug_list(address: str | None, selection: Selection) -> DebugList:
    """`rankscope debug list`: the sessions, and how this machine reaches each."""
    listings = list_sessions(address, selection)
    here = here_node_id()
    routes = {s.id: attach_route(s, here) for listing in listings for s in listing.sessions}
    attach = {
        s.id: AttachCommands(
            command=f"rankscope debug attach {s.id}",
            tunnel=routes[s.id].tunnel,
            direct=routes[s.id].direct_command,
            vscode=vscode_launch(s) if s.backend == "debugpy" else None,
        )
        for listing in listings
        for s in listing.sessions
    }
    return DebugList(tuple(listings), attach, routes)


def find_session(address: str | None, session_id: str) -> DebugSession:
    """The open session `session_id` (or a unique prefix of it), with its token."""
    sessions = [
        s
        for listing in list_sessions(address, Selection(), with_token=True)
        for s in listing.sessions
    ]
    return select_session(sessions, session_id)


def here_node_id() -> str:
    import ray

    return str(ray.get_runtime_context().get_node_id())
