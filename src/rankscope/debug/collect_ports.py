"""The collect side of `rankscope diagnose --check-debug-ports`: does every session's port
listen, and can we reach it? (`debug/cli_diagnose.py` prints the answer.)

Live sessions come from the probes; sessions whose process died come from the run directory's
`debug_session_opened` / `debug_session_closed` events, read on the hub's node.
"""

from __future__ import annotations

import socket
from typing import Any

from rankscope.debug.analysis import LoggedSession, PortCheck, check_ports, logged_sessions
from rankscope.debug.model import LOOPBACK, DebugSession
from rankscope.runtime.ask import Selection
from rankscope.runtime.client import HubClient

CONNECT_TIMEOUT_S = 1.0
MAX_LOGGED_EVENTS = 10_000


def port_checks(address: str | None, selection: Selection) -> list[PortCheck]:
    """Every debug session: reachable, tunnel-only, not listening, or its process died."""
    from rankscope.debug.collect import here_node_id, list_sessions

    client = HubClient.attach(address)
    listings = list_sessions(address, selection, client=client)
    here = here_node_id()
    live = [s for listing in listings for s in listing.sessions]
    reachable = {s.id: _can_connect(_host_from_here(s, here), s.port) for s in live}
    listens = {
        s.id: ok for s, ok in zip(live, _listens_on_nodes(live, here, reachable), strict=True)
    }
    logged = _logged(client, [listing.job_id for listing in listings])
    return check_ports(
        live,
        listens,
        reachable,
        logged,
        frozenset(p for listing in listings for p in listing.dead_probe_ids),
        frozenset(p for listing in listings for p in listing.unanswered_probe_ids),
    )


def _host_from_here(session: DebugSession, here: str) -> str | None:
    if session.external:
        return session.host
    return LOOPBACK if session.node_id == here else None


def _can_connect(host: str | None, port: int) -> bool:
    if host is None:
        return False
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return True
    except OSError:
        return False


def _probe_port(host: str, port: int) -> bool:
    return _can_connect(host, port)


def _listens_on_nodes(
    live: list[DebugSession], here: str, reachable: dict[str, bool]
) -> list[bool]:
    """Ask from each session's own node (a pinned Ray task) when this machine cannot tell."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task: Any = ray.remote(num_cpus=0)(_probe_port)
    refs: dict[int, Any] = {}
    results = [reachable[s.id] for s in live]
    for i, s in enumerate(live):
        if not results[i] and s.node_id != here:
            strategy = NodeAffinitySchedulingStrategy(s.node_id, soft=False)
            refs[i] = task.options(scheduling_strategy=strategy).remote(s.host, s.port)
    for i, ref in refs.items():
        try:
            results[i] = bool(ray.get(ref, timeout=60.0))
        except Exception:
            results[i] = False
    return results


def _logged(client: HubClient, job_ids: list[str]) -> list[LoggedSession]:
    """Sessions the run directory remembers, read through the hub (it lives on its node)."""
    events = [
        e
        for job_id in job_ids
        for e in client.events(job_id, ["debug_session_"], MAX_LOGGED_EVENTS)
    ]
    return logged_sessions(events)


__all__ = ["port_checks"]
