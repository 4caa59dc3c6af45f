"""Debug sessions in real Ray actors, driven over the socket as a user's terminal would."""

from __future__ import annotations

import io
import itertools
import json
import os
import socket
import subprocess
import sys
import time

import pytest
import ray
from typer.testing import CliRunner
from workers_debug import DebugRank

import rankscope.cli.main as cli
from helpers.cluster import cluster_address, line_of, run_cli, wait_registered
from helpers.workers import WORKER_NODE_RESOURCE, wait_until
from rankscope.debug.cli_attach import connect, run_terminal
from rankscope.debug.collect import list_sessions
from rankscope.debug.model import DebugSession
from rankscope.runtime.ask import Selection
from rankscope.runtime.client import HubClient

ENV = {"env_vars": {"RANKSCOPE_POST_MORTEM": "1"}}


@pytest.fixture(scope="module")
def ranks(cluster):
    """Four ranks with debugging on; rank 0 on the second node, ranks 1-3 on the head."""
    actor = ray.remote(num_cpus=0)(DebugRank)
    actors = [actor.options(resources={WORKER_NODE_RESOURCE: 1}, runtime_env=ENV).remote(0, 4)]
    actors += [actor.options(runtime_env=ENV).remote(r, 4) for r in range(1, 4)]
    pids = ray.get([a.pid.remote() for a in actors], timeout=120)
    wait_registered(pids, ranked=True)
    yield actors
    for a in actors:
        ray.kill(a)


def _sessions() -> list[DebugSession]:
    client = HubClient.attach()
    listings = list_sessions(None, Selection(), with_token=True, client=client)
    return [s for listing in listings for s in listing.sessions]


def _wait_session(**match: object) -> DebugSession:
    def found() -> DebugSession | None:
        for s in _sessions():
            if all(getattr(s, k) == v for k, v in match.items()):
                return s
        return None

    session = wait_until(found, timeout=60, interval=0.2, what=f"a debug session {match}")
    assert isinstance(session, DebugSession)
    return session


def _terminal(session: DebugSession, lines: list[object]) -> tuple[str, list[str]]:
    """Attach in-process as `debug attach` does; `lines` are typed in order (EOFError = Ctrl-D)."""
    from rankscope.debug.analysis import attach_route
    from rankscope.debug.collect import here_node_id

    prompts: list[str] = []
    typed = iter(lines)

    def read_line(prompt: str) -> str:
        prompts.append(prompt)
        item = next(typed, "c")
        if isinstance(item, type) and issubclass(item, BaseException):
            raise item
        return str(item)

    out = io.StringIO()
    conn = connect(session, attach_route(session, here_node_id()))
    run_terminal(conn, session.token, out, read_line)
    return out.getvalue(), prompts


def test_rank_filter_pauses_only_rank_0_and_a_terminal_inspects_and_resumes_it(ranks):
    refs = [a.stop_here.remote() for a in ranks]
    assert ray.get(refs[1:], timeout=30) == [42, 42, 42]  # not rank 0: no stop
    session = _wait_session(rank=0)

    listed = run_cli("debug", "list", "--address", cluster_address())
    assert listed.returncode == 0, listed.stderr
    text = " ".join(listed.stdout.split())
    assert "1 open debug session" in text
    row = next(line for line in listed.stdout.splitlines() if session.id in line)
    assert [cell.strip() for cell in row.split("│")[1:3]] == [session.id, "0"], row
    where = f"workers_debug.py:{line_of(DebugRank.stop_here, 'conditional_breakpoint(')}"
    assert (
        f"{session.id} (rank 0, breakpoint at {where} in stop_here, waits 60s): "
        f"rankscope debug attach {session.id}"
    ) in text
    assert "tunnels through Ray" in text  # rank 0 is on the other node, bound to its loopback
    assert session.token not in listed.stdout

    attach = subprocess.run(
        [sys.executable, "-m", "rankscope.cli.main", "debug", "attach", session.id[:6]],
        input="p some_local\nc\n",
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RAY_ADDRESS": cluster_address()},
    )
    assert attach.returncode == 0, attach.stderr
    assert "through a Ray tunnel" in attach.stderr
    assert "attached to rank 0" in attach.stdout
    assert "{'rank': 0, 'answer': 42}" in attach.stdout
    assert "(Pdb) " in attach.stdout
    assert ray.get(refs[0], timeout=30) == 42
    assert _sessions() == []


def test_debugging_off_or_condition_false_opens_no_session(ranks):
    ray.get(ranks[0].set_debugging.remote(False))
    try:
        started = time.time()
        assert ray.get(ranks[0].stop_here.remote(), timeout=30) == 42
    finally:
        ray.get(ranks[0].set_debugging.remote(True))
    assert ray.get(ranks[0].stop_here.remote(condition=False), timeout=30) == 42
    assert time.time() - started < 10
    assert _sessions() == []


def test_timeout_without_a_client_continues_and_says_so(ranks):
    started = time.time()
    assert ray.get(ranks[0].stop_here.remote(timeout=2), timeout=60) == 42
    assert 2 <= time.time() - started < 30
    logs = ray.get(ranks[0].logs.remote())
    assert any("had no client within 2s; continuing" in line for line in logs), logs
    assert _sessions() == []


def test_wrong_token_is_refused_and_the_session_stays_open(ranks):
    ref = ranks[0].stop_here.remote()
    session = _wait_session(rank=0)
    with socket.create_connection(("127.0.0.1", session.port), timeout=10) as raw:
        raw.sendall(b"not-the-token\n")
        reply = raw.makefile().read()
    assert "wrong token; connection refused" in reply
    still = _wait_session(id=session.id, refused=1)
    assert still.state == "waiting"

    ports = CliRunner().invoke(cli.app, ["diagnose", "--check-debug-ports"])
    assert ports.exit_code == 0, ports.output
    line = next(line for line in ports.output.splitlines() if line.startswith(session.id))
    assert f"rank 0  pid {session.pid}@{session.node_ip}  127.0.0.1:{session.port}" in line
    assert "listening (loopback): bound to loopback" in line  # rank 0 is on the other node

    out, prompts = _terminal(session, ["p some_local['answer'] * 2", "l", "n", "q"])
    assert "84" in out and prompts[0] == "(Pdb) "
    assert "->\t        return some_local" in out  # `l` marks the line after the breakpoint
    assert "--Return--" in out  # `n` stepped to the return
    assert "rankscope: detached; the process continues" in out  # `q` never kills the job
    assert ray.get(ref, timeout=30) == 42
    logs = ray.get(ranks[0].logs.remote())
    assert any(f"debug session {session.id} refused a connection" in line for line in logs)


def test_post_mortem_in_rank_2_stops_at_the_raising_line_then_the_driver_gets_the_error(ranks):
    from workers_debug import DebugRank as Rank

    refs = [a.fail_in_rank.remote(2) for a in ranks]
    session = _wait_session(rank=2)
    assert session.reason == "post-mortem"
    assert session.exception == "ValueError: bad batch on rank 2"
    assert session.function == "fail_in_rank"
    assert session.lineno == line_of(Rank.fail_in_rank, "raise ValueError")

    out, _ = _terminal(session, ["p value", "w", "interact", "value + 1", EOFError, "c"])
    assert "20" in out and "21" in out
    assert "-> raise ValueError" in out
    assert "the exception continues to propagate" in out
    assert ray.get(refs[0]) == 0 and ray.get(refs[1]) == 10 and ray.get(refs[3]) == 30
    with pytest.raises(ray.exceptions.RayTaskError, match="bad batch on rank 2"):
        ray.get(refs[2], timeout=30)


def test_sync_pauses_the_other_ranks_until_the_session_ends(ranks):
    hub = HubClient.attach()
    training = [a.train.remote(40) for a in ranks[1:]]
    time.sleep(0.5)
    paused = ranks[0].stop_here.remote(sync=True)
    session = _wait_session(rank=0, sync=True)

    def steps() -> dict[int | None, int]:
        return {
            p.context.rank: p.progress.step for p in hub.probes() if p.context.rank in (1, 2, 3)
        }

    time.sleep(2.0)  # the pause reaches every probe within a heartbeat
    before = steps()
    time.sleep(1.5)
    assert steps() == before and all(s < 40 for s in before.values()), before

    _terminal(session, ["c"])
    assert ray.get(paused, timeout=30) == 42
    for finished in ray.get(training, timeout=60):
        assert len(finished) == 40
        gaps = [b - a for a, b in itertools.pairwise(finished)]
        assert max(gaps) > 3.0  # they waited while rank 0 was paused


def test_debugpy_session_is_listed_with_a_vs_code_configuration(ranks):
    ref = ranks[1].stop_here.remote(backend="debugpy", timeout=8)  # rank filter: rank 0 only
    assert ray.get(ref, timeout=30) == 42
    ref = ranks[0].stop_here.remote(backend="debugpy", timeout=8)
    session = _wait_session(rank=0, backend="debugpy")
    listed = CliRunner().invoke(cli.app, ["debug", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    doc = json.loads(listed.output)
    vscode = doc["data"]["attach"][session.id]["vscode"]
    assert vscode["request"] == "attach" and vscode["type"] == "debugpy"
    assert vscode["connect"] == {"host": "127.0.0.1", "port": session.port}
    assert vscode["pathMappings"][0]["remoteRoot"] == session.cwd
    assert "token" not in json.dumps(doc["data"]["jobs"]).replace('"token": ""', "")
    assert ray.get(ref, timeout=60) == 42  # nobody attached: it continues after the timeout


def test_a_session_whose_process_died_leaves_the_list_and_diagnose_names_it(cluster):
    actor = ray.remote(num_cpus=0)(DebugRank).remote(0, 1)
    pid = ray.get(actor.pid.remote(), timeout=60)
    wait_registered([pid], ranked=True)
    actor.stop_here.remote()
    session = _wait_session(pid=pid)
    time.sleep(1.0)  # the opening event reaches the run directory with the next heartbeat
    ray.kill(actor)
    wait_until(lambda: all(s.id != session.id for s in _sessions()), timeout=30, what="gone")

    def died() -> bool:
        result = CliRunner().invoke(cli.app, ["diagnose", "--check-debug-ports", "--json"])
        checks = json.loads(result.output)["data"]
        return result.exit_code == 1 and any(
            c["session_id"] == session.id and c["verdict"] == "process died" for c in checks
        )

    wait_until(died, timeout=30, interval=1.0, what="diagnose to report the dead session")
