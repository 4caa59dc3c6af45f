"""`rankscope diagnose --check-debug-ports`: does every session's port listen, and can we reach it?

Live sessions come from the probes; sessions whose process died come from the run directory's
`debug_session_opened` / `debug_session_closed` events, read on the hub's node.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

from rich.console import Console
from rich.text import Text

from rankscope.analysis.debug import FINDINGS, PortCheck, PortVerdict, check_ports, logged_sessions
from rankscope.debug.model import LOOPBACK, DebugSession

CONNECT_TIMEOUT_S = 1.0
MAX_EVENT_LINES = 100_000


def check_debug_ports(address: str | None, job: str | None, as_json: bool, console: Console) -> int:
    """One line per debug session: reachable, tunnel-only, not listening, or process died."""
    import ray

    from rankscope.cli.render import to_json
    from rankscope.debug.client import here_node_id, list_sessions
    from rankscope.runtime.client import HubClient

    client = HubClient.attach(address)
    listings = list_sessions(client, job)
    here = here_node_id()
    live = [s for listing in listings for s in listing.sessions]
    reachable = {s.id: _can_connect(_host_from_here(s, here), s.port) for s in live}
    listens = {
        s.id: ok for s, ok in zip(live, _listens_on_nodes(live, here, reachable), strict=True)
    }
    logged = _logged(client.info().run_dir, [listing.job_id for listing in listings], ray)
    checks = check_ports(
        live,
        listens,
        reachable,
        logged,
        frozenset(p for listing in listings for p in listing.dead_probe_ids),
        frozenset(p for listing in listings for p in listing.unanswered_probe_ids),
    )
    if as_json:
        console.print_json(to_json("diagnose-debug-ports", checks))
    else:
        console.print(render_port_checks(checks))
    return 1 if any(c.verdict in FINDINGS for c in checks) else 0


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


def _read_debug_events(run_dir: str, job_ids: list[str]) -> list[dict[str, Any]]:
    events = []
    for job_id in job_ids:
        path = os.path.join(run_dir, job_id or "no-job", "events.jsonl")
        try:
            with open(path, encoding="utf-8") as f:
                for n, line in enumerate(f):
                    if n >= MAX_EVENT_LINES:
                        break
                    if '"debug_session_' in line:
                        try:
                            events.append(json.loads(line))
                        except ValueError:
                            continue
        except OSError:
            continue
    return events


def _logged(run_dir: str, job_ids: list[str], ray: Any) -> list[Any]:
    """Sessions the run directory remembers; read on the hub's (head) node."""
    task: Any = ray.remote(num_cpus=0, resources={"node:__internal_head__": 0.001})(
        _read_debug_events
    )
    try:
        events = ray.get(task.remote(run_dir, job_ids), timeout=60.0)
    except Exception:
        return []
    return logged_sessions(events)


__all__ = ["PortVerdict", "check_debug_ports", "render_port_checks"]
