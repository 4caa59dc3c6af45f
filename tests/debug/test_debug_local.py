"""Debug pieces without Ray: rank filters, routes, port verdicts, and a post-mortem session
served in this process and driven over a real socket."""

from __future__ import annotations

import io
import threading

import pytest

from helpers.workers import wait_until
from rankscope.debug import post_mortem, worker
from rankscope.debug.analysis import (
    PortVerdict,
    attach_route,
    check_ports,
    logged_sessions,
    rank_matches,
    select_session,
    vscode_launch,
)
from rankscope.debug.cli_attach import run_terminal
from rankscope.debug.cli_tunnel import SocketConnection
from rankscope.debug.model import DebugSession
from rankscope.errors import UserError


def _session(**changes: object) -> DebugSession:
    base = dict(
        id="ab12cd34", job_id="01000000", rank=3, world_size=4, node_id="n1", node_ip="10.0.0.5",
        hostname="w1", pid=1234, actor_class="Worker", probe_id="p1", host="127.0.0.1",
        port=40000, backend="pdb", reason="breakpoint", name=None, filename="/app/train.py",
        lineno=42, function="step", stack=(), since=0.0, timeout=600.0, state="waiting",
        sync=False, cwd="/app",
    )  # fmt: skip
    base.update(changes)
    return DebugSession(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rank", "rank_filter", "stops"),
    [
        (0, None, True),
        (None, None, True),
        (None, 0, False),
        (2, 2, True),
        (2, 3, False),
        (2, [1, 2], True),
        (2, range(3, 5), False),
        (1, lambda r: r % 2 == 1, True),
    ],
)
def test_rank_filter(rank, rank_filter, stops):
    assert rank_matches(rank, rank_filter) is stops


def test_rank_filter_rejects_a_bool():
    with pytest.raises(UserError, match="rank_filter=True"):
        rank_matches(0, True)


def test_routes_and_vscode_configuration():
    s = _session()
    assert not attach_route(s, "n1").tunnel
    tunnel = attach_route(s, "head")
    assert tunnel.tunnel and tunnel.direct_command.endswith("# run on node 10.0.0.5")
    assert not attach_route(_session(host="10.0.0.5"), "head").tunnel
    config = vscode_launch(_session(backend="debugpy"), port=5678)
    assert config["connect"] == {"host": "127.0.0.1", "port": 5678}
    assert config["pathMappings"] == [{"localRoot": "${workspaceFolder}", "remoteRoot": "/app"}]


def test_select_session_by_unique_prefix():
    sessions = [_session(id="ab12cd34"), _session(id="ab99ffee")]
    assert select_session(sessions, "ab1").id == "ab12cd34"
    with pytest.raises(UserError, match="matches 2 sessions"):
        select_session(sessions, "ab")
    with pytest.raises(UserError, match="no debug session 'zz'"):
        select_session(sessions, "zz")


def test_port_verdicts():
    live = [_session(id="a"), _session(id="b"), _session(id="c", host="10.0.0.5")]
    events = [
        {"kind": "debug_session_opened", "probe_id": "dead", "time": 1.0,
         "payload": {"id": "d", "rank": 1, "pid": 9, "hostname": "w2", "location": "x.py:3 f",
                     "port": 1}},
        {"kind": "debug_session_opened", "probe_id": "dead", "time": 1.0,
         "payload": {"id": "e", "rank": 2, "pid": 9, "hostname": "w2", "location": "x.py:3 f",
                     "port": 2}},
        {"kind": "debug_session_closed", "probe_id": "dead", "time": 2.0, "payload": {"id": "e"}},
    ]  # fmt: skip
    checks = check_ports(
        live,
        listens={"a": True, "b": False, "c": True},
        reachable={"a": False, "c": False},
        logged=logged_sessions(events),
        dead_probe_ids=frozenset({"dead"}),
        unanswered_probe_ids=frozenset(),
    )
    verdicts = {c.session_id: c.verdict for c in checks}
    assert verdicts == {
        "a": PortVerdict.TUNNEL,
        "b": PortVerdict.NOT_LISTENING,
        "c": PortVerdict.UNREACHABLE,
        "d": PortVerdict.PROCESS_DIED,
    }


@pytest.fixture
def no_probe_left():
    """Debugging on; a session starts this process's probe (to be listed): stop it after."""
    import rankscope

    rankscope.enable_full_debugging()
    yield
    rankscope.enable_lightweight_monitoring()
    rankscope.shutdown()


def test_post_mortem_reraises_at_once_when_debugging_is_off():
    import rankscope

    rankscope.enable_lightweight_monitoring()

    @post_mortem(timeout=30)
    def divide(a: int, b: int) -> float:
        return a / b

    with pytest.raises(ZeroDivisionError):
        divide(7, 0)  # would wait 30 s in a session if one were opened
    assert worker.open_sessions() == []


def test_post_mortem_decorator_serves_the_raising_frame_then_reraises(no_probe_left):
    @post_mortem(timeout=30)
    def divide(a: int, b: int) -> float:
        ratio_hint = a * 100
        return ratio_hint / b

    outcome: list[BaseException] = []

    def run() -> None:
        try:
            divide(7, 0)
        except ZeroDivisionError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    session = wait_until(lambda: next(iter(worker.open_sessions()), None), what="a session")
    assert session.reason == "post-mortem" and session.function == "divide"
    assert session.exception == "ZeroDivisionError: division by zero"

    out = io.StringIO()
    typed = iter(["p ratio_hint", "c"])
    conn = SocketConnection("127.0.0.1", session.port)
    assert run_terminal(conn, session.token, out, lambda prompt: next(typed)) == "closed"
    thread.join(10)
    assert "700" in out.getvalue()
    assert outcome and isinstance(outcome[0], ZeroDivisionError)
    assert worker.open_sessions() == []


def test_debug_command_surface():
    import typer.main

    import rankscope.cli.main as cli

    group = typer.main.get_command(cli.app).commands["debug"]  # type: ignore[attr-defined]
    surface = {
        name: {opt for p in command.params for opt in p.opts}
        for name, command in group.commands.items()
    }
    assert surface == {
        "list": {"--address", "--job", "--json"},
        "attach": {"session_id", "--address"},
    }
