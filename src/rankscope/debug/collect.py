"""Debug sessions cluster-wide: ask every live probe which sessions it holds open."""

from __future__ import annotations

from rankscope.debug.analysis import select_session
from rankscope.debug.model import DebugSession, SessionListing
from rankscope.runtime.client import HubClient
from rankscope.runtime.protocol import ProbeState, ProbeStatus
from rankscope.runtime.selection import select_jobs

__all__ = ["find_session", "here_node_id", "list_sessions"]

LIST_DEADLINE_S = 3.0


def list_sessions(
    client: HubClient,
    job: str | None,
    *,
    with_token: bool = False,
    deadline_s: float = LIST_DEADLINE_S,
) -> list[SessionListing]:
    """Ask every live probe of the selected jobs for its open sessions."""
    listings = []
    for job_id, probes in select_jobs(client.probes(), job).items():
        live = [p for p in probes if p.state != ProbeState.DEAD]
        sessions: list[DebugSession] = []
        missing: list[ProbeStatus] = []
        if live:
            result = client.fan_out(
                "debug_sessions", live, args={"with_token": with_token}, deadline_s=deadline_s
            )
            for reply in result.replies:
                if reply.ok:
                    sessions.extend(reply.payload)
            missing = list(result.missing)
        sessions.sort(key=lambda s: (s.rank is None, s.rank or 0, s.pid, s.since))
        dead = tuple(p.info.probe_id for p in probes if p.state == ProbeState.DEAD)
        listings.append(
            SessionListing(
                job_id,
                tuple(sessions),
                tuple(p.context.label for p in missing),
                tuple(p.info.probe_id for p in missing),
                dead,
            )
        )
    return listings


def find_session(client: HubClient, session_id: str) -> DebugSession:
    sessions = [
        s for listing in list_sessions(client, None, with_token=True) for s in listing.sessions
    ]
    return select_session(sessions, session_id)


def here_node_id() -> str:
    import ray

    return str(ray.get_runtime_context().get_node_id())
