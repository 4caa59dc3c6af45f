"""Pure logic of debug sessions: rank filters, how to reach a session, port check verdicts.

No Ray, no sockets: the debug package and the CLI feed these plain records.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rankscope.debug.model import LOOPBACK, AttachRoute, DebugSession
from rankscope.errors import UserError

RankFilter = int | Iterable[int] | Callable[[int], bool] | None


def rank_matches(rank: int | None, rank_filter: RankFilter) -> bool:
    """Whether a process of `rank` stops: None matches every process, else the rank must be
    known and pass the filter (an int, some ints, or a predicate).

    Example: `rank_matches(0, lambda r: r == 0)` is True.
    """
    if rank_filter is None:
        return True
    if rank is None:
        return False
    if isinstance(rank_filter, bool):
        raise UserError(f"rank_filter={rank_filter!r}: pass a rank, ranks, or a function of rank")
    if isinstance(rank_filter, int):
        return rank == rank_filter
    if callable(rank_filter):
        return bool(rank_filter(rank))
    return rank in set(rank_filter)


def attach_route(session: DebugSession, here_node_id: str) -> AttachRoute:
    """Direct on the session's own node or to an external address; else a tunnel through Ray."""
    command = f"rankscope debug attach {session.id}"
    where = f"on node {session.node_ip or session.hostname}"
    if session.node_id == here_node_id:
        return AttachRoute(False, session.host, session.port, f"{command} (this node)")
    if session.external:
        return AttachRoute(False, session.host, session.port, f"{command} (reachable from here)")
    return AttachRoute(True, LOOPBACK, session.port, f"{command}   # run {where}")


def vscode_launch(
    session: DebugSession, *, host: str | None = None, port: int | None = None
) -> dict[str, Any]:
    """A VS Code launch.json "attach" configuration for a debugpy session."""
    return {
        "name": f"rankscope {session.label} ({session.id})",
        "type": "debugpy",
        "request": "attach",
        "connect": {"host": host or session.host, "port": port or session.port},
        "pathMappings": [{"localRoot": "${workspaceFolder}", "remoteRoot": session.cwd}],
        "justMyCode": False,
    }


def select_session(sessions: Sequence[DebugSession], wanted: str) -> DebugSession:
    """The session whose id is `wanted`, or starts with it when that prefix is unambiguous."""
    exact = [s for s in sessions if s.id == wanted]
    if exact:
        return exact[0]
    matches = [s for s in sessions if s.id.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        known = ", ".join(sorted(s.id for s in sessions)) or "none open"
        raise UserError(
            f"no debug session {wanted!r} (open: {known}); `rankscope debug list` shows them"
        )
    raise UserError(f"{wanted!r} matches {len(matches)} sessions: give more of the id")


class PortVerdict(str, enum.Enum):
    """What `rankscope diagnose --check-debug-ports` found for one session."""

    REACHABLE = "reachable"
    """The port listens and this machine can connect to it."""
    TUNNEL = "listening (loopback)"
    """The port listens on its node's loopback; `debug attach` tunnels through Ray."""
    NOT_LISTENING = "not listening"
    """The session is registered but nothing accepts connections on its port."""
    UNREACHABLE = "unreachable"
    """The port listens on its node but this machine cannot connect (firewall, routing)."""
    PROCESS_DIED = "process died"
    """The process opened a session and died before closing it."""
    UNANSWERED = "no answer"
    """The process is alive but its probe did not answer in time."""


FINDINGS = frozenset({PortVerdict.NOT_LISTENING, PortVerdict.UNREACHABLE, PortVerdict.PROCESS_DIED})


@dataclass(frozen=True)
class LoggedSession:
    """A session as the run directory's events remember it (opened, maybe closed)."""

    id: str
    probe_id: str
    rank: int | None
    pid: int
    hostname: str
    location: str
    port: int
    opened_at: float
    closed: bool


@dataclass(frozen=True)
class PortCheck:
    session_id: str
    label: str
    node: str
    pid: int
    endpoint: str
    verdict: PortVerdict
    detail: str


def logged_sessions(events: Iterable[Mapping[str, Any]]) -> list[LoggedSession]:
    """Sessions from `debug_session_opened` / `debug_session_closed` events, in order."""
    opened: dict[str, LoggedSession] = {}
    closed: set[str] = set()
    for event in events:
        payload = event.get("payload") or {}
        session_id = str(payload.get("id", ""))
        if not session_id:
            continue
        if event.get("kind") == "debug_session_opened":
            opened[session_id] = LoggedSession(
                id=session_id,
                probe_id=str(event.get("probe_id", "")),
                rank=payload.get("rank"),
                pid=int(payload.get("pid", 0)),
                hostname=str(payload.get("hostname", "")),
                location=str(payload.get("location", "")),
                port=int(payload.get("port", 0)),
                opened_at=float(event.get("time", 0.0)),
                closed=False,
            )
        elif event.get("kind") == "debug_session_closed":
            closed.add(session_id)
    return [
        LoggedSession(**{**entry.__dict__, "closed": entry.id in closed})
        for entry in opened.values()
    ]


def check_ports(
    live: Sequence[DebugSession],
    listens: Mapping[str, bool],
    reachable: Mapping[str, bool],
    logged: Sequence[LoggedSession],
    dead_probe_ids: frozenset[str],
    unanswered_probe_ids: frozenset[str],
) -> list[PortCheck]:
    """One verdict per session: live ones by their port, logged-open ones by their process."""
    checks = []
    for s in live:
        endpoint = f"{s.host}:{s.port}"
        node = s.node_ip or s.hostname
        if not listens.get(s.id, False):
            verdict, detail = (
                PortVerdict.NOT_LISTENING,
                "registered, but its port refuses connections",
            )
        elif reachable.get(s.id, False):
            verdict, detail = PortVerdict.REACHABLE, f"attach: rankscope debug attach {s.id}"
        elif not s.external:
            verdict = PortVerdict.TUNNEL
            detail = (
                f"bound to loopback on {node}; `rankscope debug attach {s.id}` tunnels through Ray"
            )
        else:
            verdict = PortVerdict.UNREACHABLE
            detail = f"listens on {node} but this machine cannot connect (firewall?)"
        checks.append(PortCheck(s.id, s.label, node, s.pid, endpoint, verdict, detail))
    live_ids = {s.id for s in live}
    for entry in logged:
        if entry.closed or entry.id in live_ids:
            continue
        label = (
            f"rank {entry.rank}" if entry.rank is not None else f"pid {entry.pid}@{entry.hostname}"
        )
        if entry.probe_id in dead_probe_ids:
            verdict, detail = PortVerdict.PROCESS_DIED, f"died while paused at {entry.location}"
        elif entry.probe_id in unanswered_probe_ids:
            verdict, detail = (
                PortVerdict.UNANSWERED,
                f"paused at {entry.location}; its probe did not answer",
            )
        else:
            continue  # closed since, and the closing event is not written yet
        checks.append(
            PortCheck(
                entry.id, label, entry.hostname, entry.pid, f"port {entry.port}", verdict, detail
            )
        )
    return checks
