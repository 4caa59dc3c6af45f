"""The CLI's side of a debug session: a terminal attached to it, or a port forwarded to it."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from typing import TextIO

from rankscope.debug.cli_tunnel import Connection, RelayConnection, SocketConnection
from rankscope.debug.model import AttachRoute, DebugSession
from rankscope.errors import UserError

PROMPTS = ("(Pdb) ", ">>> ", "... ")
CONSOLE_EOF = "\x04"
"""Sent for Ctrl-D at the `interact` console's prompt: ends the console, not the session."""
PROMPT_SETTLE_S = 0.1
"""A known prompt followed by this much silence means the session waits for input."""


def connect(session: DebugSession, route: AttachRoute) -> Connection:
    """A connection to the session, direct or through a relay on its node."""
    try:
        if route.tunnel:
            return RelayConnection(session.node_id, route.host, route.port)
        return SocketConnection(route.host, route.port)
    except Exception as exc:
        reason = str(getattr(exc, "cause", None) or exc).strip().splitlines()[-1]
        raise UserError(
            f"cannot connect to debug session {session.id} on {route.host}:{route.port} "
            f"({reason}): it may have just ended; `rankscope debug list` shows the open ones"
        ) from None


def run_terminal(
    conn: Connection,
    token: str,
    out: TextIO,
    read_line: Callable[[str], str] = input,
) -> str:
    """Present the token, then relay: the session's output to `out`, typed lines back.

    Returns how it ended: `closed` (the session ended or refused us) or `detached` (EOF here).
    """
    conn.send(f"{token}\n".encode())
    pending = ""
    while True:
        prompt = _prompt_of(pending)
        chunk = conn.recv(PROMPT_SETTLE_S if prompt else 0.5)
        if chunk is None:
            if prompt is None:
                continue
            out.write(pending[: -len(prompt)])
            out.flush()
            pending = ""
            try:
                line = read_line(prompt)
            except EOFError:
                if prompt != PROMPTS[0]:  # Ctrl-D in `interact`: back to pdb
                    conn.send(f"{CONSOLE_EOF}\n".encode())
                    out.write("\n")
                    continue
                out.write("\nrankscope: detached; the process continues\n")
                conn.close()
                return "detached"
            except KeyboardInterrupt:
                out.write("\n(type c to continue the process, q to detach)\n")
                conn.send(b"\n")
                continue
            conn.send(f"{line}\n".encode())
            continue
        if chunk == b"":
            out.write(pending)
            out.flush()
            conn.close()
            return "closed"
        pending += chunk.decode("utf-8", "replace")
        cut = pending.rfind("\n")
        if cut >= 0:
            out.write(pending[: cut + 1])
            out.flush()
            pending = pending[cut + 1 :]


def _prompt_of(text: str) -> str | None:
    for prompt in PROMPTS:
        if text.endswith(prompt):
            return prompt
    return None


def enable_line_editing() -> None:
    """readline history and editing for `input()`, where the platform has it."""
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401


class PortForward:
    """A local port whose connections are relayed to a session's port (for an IDE)."""

    def __init__(self, session: DebugSession, route: AttachRoute) -> None:
        self._session, self._route = session, route
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(4)
        self.port = int(self._listener.getsockname()[1])

    def serve_forever(self) -> None:
        while True:
            client, _ = self._listener.accept()
            threading.Thread(target=self._pump, args=(client,), daemon=True).start()

    def _pump(self, client: socket.socket) -> None:
        remote = connect(self._session, self._route)
        stop = threading.Event()

        def upstream() -> None:
            try:
                while not stop.is_set():
                    data = client.recv(65536)
                    if not data:
                        break
                    remote.send(data)
            except OSError:
                pass
            stop.set()

        threading.Thread(target=upstream, daemon=True).start()
        try:
            while not stop.is_set():
                data = remote.recv(0.2)
                if data == b"":
                    break
                if data:
                    client.sendall(data)
        except OSError:
            pass
        stop.set()
        client.close()
        remote.close()
