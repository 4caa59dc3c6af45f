"""Serving a paused process: a listening socket, a one-time token, pdb over the connection.

The session binds 127.0.0.1 unless RANKSCOPE_DEBUG_EXTERNAL=1, registers itself (see
`registry`), and waits up to its timeout for a client that presents the token. Wrong tokens are
refused, logged and counted while the session stays open; no client in time means the process
continues, with a log line. `q`, Ctrl-D and a dropped connection detach instead of killing the
job, and breakpoints set during a session are cleared when it continues.
"""

from __future__ import annotations

import code
import contextlib
import hmac
import logging
import os
import pdb
import secrets
import socket
import sys
import time
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

from rankscope.debug import worker, worker_sync
from rankscope.debug.model import LOOPBACK, DebugSession, SessionFrame

log = logging.getLogger("rankscope")

TOKEN_READ_S = 10.0
"""Seconds a new connection has to present its token."""
MAX_TOKEN_BYTES = 256
MAX_STACK = 64
ACCEPT_POLL_S = 0.5
SKIP_MODULES = ["rankscope.debug.*", "rankscope.runtime.*"]
"""pdb never stops inside rankscope's own machinery."""


class SocketIO:
    """A text stream over a connected socket for pdb; it never raises into the debugged code."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._rfile = sock.makefile("rb")
        self.closed = False

    def write(self, text: str) -> int:
        if not self.closed:
            try:
                self._sock.sendall(text.encode("utf-8", "replace"))
            except OSError:
                self.closed = True
        return len(text)

    def flush(self) -> None:
        pass

    def readline(self, limit: int = -1) -> str:
        if self.closed:
            return ""
        try:
            line = self._rfile.readline(limit if limit > 0 else 1 << 16)
        except (OSError, ValueError):
            self.closed = True
            return ""
        if not line:
            self.closed = True
        return line.decode("utf-8", "replace")

    def isatty(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True
        for closable in (self._rfile, self._sock):
            with contextlib.suppress(OSError):
                closable.close()


class RemotePdb(pdb.Pdb):
    """pdb on a socket: `q` and EOF detach (the job goes on), `interact` uses the socket too."""

    def __init__(self, io: SocketIO, on_end: Callable[[], None]) -> None:
        stream: Any = io
        super().__init__(
            stdin=stream, stdout=stream, skip=SKIP_MODULES, nosigint=True, readrc=False
        )
        self.prompt = "(Pdb) "
        self._io = io
        self._on_end = on_end
        self._ended = False

    def end(self) -> None:
        if not self._ended:
            self._ended = True
            self._on_end()

    def set_continue(self) -> None:
        self.clear_all_breaks()  # nobody would be there to answer a later stop
        super().set_continue()
        self.end()

    def do_quit(self, arg: str) -> bool | None:
        """q(uit): detach; the process continues (the job is never killed from here)."""
        self.message("rankscope: detached; the process continues")
        return self.do_continue(arg)

    do_q = do_exit = do_quit

    def do_EOF(self, arg: str) -> bool | None:
        return self.do_continue(arg)

    def do_interact(self, arg: str) -> None:
        """interact: a Python console in the current frame's namespace, over this connection."""
        frame = self.curframe
        if frame is None:
            return
        namespace = {**frame.f_globals, **self.curframe_locals}
        console = code.InteractiveConsole(namespace)
        console.raw_input = self._console_input  # type: ignore[method-assign]
        saved = sys.stdout, sys.stderr
        stream: Any = self._io
        sys.stdout = sys.stderr = stream
        try:
            console.interact("*interactive* (Ctrl-D returns to pdb)", "now exiting interactive")
        except SystemExit:  # exit() in the console ends the console, not the worker
            self.message("now exiting interactive")
        finally:
            sys.stdout, sys.stderr = saved

    def _console_input(self, prompt: str = "") -> str:
        self._io.write(prompt)
        line = self._io.readline()
        if not line or line.strip() == "\x04":  # EOF, or Ctrl-D relayed by `debug attach`
            raise EOFError
        return line.rstrip("\r\n")


class Session:
    """One open session: its record, its listening socket, and how it ends."""

    def __init__(self, record: DebugSession, listener: socket.socket | None) -> None:
        self.record = record
        self.listener = listener
        self.conn: SocketIO | None = None
        self._closed = False

    @property
    def id(self) -> str:
        return self.record.id

    def wait_for_client(self) -> SocketIO | None:
        """Accept connections until one presents the token, or the timeout passes (None)."""
        assert self.listener is not None
        deadline = None if self.record.timeout is None else time.time() + self.record.timeout
        while True:
            remaining = None if deadline is None else deadline - time.time()
            if remaining is not None and remaining <= 0:
                return None
            self.listener.settimeout(
                ACCEPT_POLL_S if remaining is None else min(remaining, ACCEPT_POLL_S)
            )
            try:
                conn, peer = self.listener.accept()
            except TimeoutError:
                continue
            if self._authenticated(conn, peer):
                conn.settimeout(None)
                self.conn = SocketIO(conn)
                worker.update(self.id, state="attached")
                return self.conn
            conn.close()

    def _authenticated(self, conn: socket.socket, peer: Any) -> bool:
        conn.settimeout(TOKEN_READ_S)
        presented = b""
        try:
            while not presented.endswith(b"\n") and len(presented) < MAX_TOKEN_BYTES:
                byte = conn.recv(1)
                if not byte:
                    break
                presented += byte
        except OSError:
            pass
        token = presented.strip().decode("utf-8", "replace")
        if token and hmac.compare_digest(token, self.record.token):
            return True
        if not token:
            log.info(
                "rankscope: debug session %s: a connection from %s sent no token", self.id, peer
            )
            return False
        worker.note_refused(self.id)
        log.warning(
            "rankscope: debug session %s refused a connection from %s: wrong token; "
            "the session stays open",
            self.id,
            peer,
        )
        with contextlib.suppress(OSError):
            conn.sendall(b"rankscope: wrong token; connection refused\n")
        return False

    def close(self, outcome: str) -> None:
        if self._closed:
            return
        self._closed = True
        for closable in (self.conn, self.listener):
            if closable is not None:
                with contextlib.suppress(OSError):
                    closable.close()
        worker.remove(self.id, outcome)
        if self.record.sync:
            worker_sync.announce("debug_resume", {"session_id": self.id}, self.record.job_id)


def open_session(
    frame: FrameType,
    *,
    reason: str,
    name: str | None,
    backend: str,
    timeout: float | None,
    sync_ranks: bool,
    exception: str = "",
    port_for: Callable[[str], int] | None = None,
) -> Session:
    """Listen (pdb) or take the debugpy port, register, tell the other ranks when `sync_ranks`."""
    from rankscope.context import get_context
    from rankscope.runtime.api import init

    try:
        probe = init()
    except Exception as exc:
        log.warning("rankscope: no probe, the session will not be listed: %s", exc)
        probe = None
    context = get_context()
    host = _bind_host(context.node_ip)
    listener: socket.socket | None = None
    if port_for is None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, 0))
        listener.listen(8)
        port = listener.getsockname()[1]
    else:
        port = port_for(host)
    stack = _stack(frame)
    record = DebugSession(
        id=secrets.token_hex(4),
        job_id=context.job_id,
        rank=context.rank,
        world_size=context.world_size,
        node_id=context.node_id,
        node_ip=context.node_ip,
        hostname=context.hostname,
        pid=context.pid,
        actor_class=context.actor_class,
        probe_id=probe.probe_id if probe is not None else "",
        host=host,
        port=port,
        backend=backend,
        reason=reason,
        name=name,
        filename=stack[0].filename,
        lineno=stack[0].lineno,
        function=stack[0].function,
        stack=stack,
        since=time.time(),
        timeout=timeout,
        state="waiting",
        sync=sync_ranks,
        cwd=os.getcwd(),
        exception=exception,
        token=secrets.token_hex(16),
    )
    worker.add(record)
    session = Session(record, listener)
    wait = "forever" if timeout is None else f"up to {timeout:g}s"
    log.warning(
        "rankscope: %s paused at %s in %s (%s%s); debug session %s on %s:%d waits %s for a "
        "client: rankscope debug attach %s",
        record.label,
        record.location,
        record.function,
        reason,
        f" {name}" if name else "",
        record.id,
        host,
        port,
        wait,
        record.id,
    )
    if sync_ranks and probe is not None:
        worker_sync.announce(
            "debug_pause",
            {
                "session_id": record.id,
                "probe_id": record.probe_id,
                "label": record.label,
                "location": record.location,
            },
            record.job_id,
        )
    return session


def _bind_host(node_ip: str) -> str:
    if os.environ.get("RANKSCOPE_DEBUG_EXTERNAL", "") not in ("1", "true", "yes"):
        return LOOPBACK
    host = node_ip or socket.gethostbyname(socket.gethostname())
    log.warning(
        "rankscope: RANKSCOPE_DEBUG_EXTERNAL=1: the debug session listens on %s, reachable from "
        "the network (pdb sessions are protected by a one-time token; debugpy ones are not)",
        host,
    )
    return host


def _stack(frame: FrameType) -> tuple[SessionFrame, ...]:
    frames: list[SessionFrame] = []
    current: FrameType | None = frame
    while current is not None and len(frames) < MAX_STACK:
        code_ = current.f_code
        frames.append(SessionFrame(code_.co_name, code_.co_filename, current.f_lineno))
        current = current.f_back
    return tuple(frames)


def timed_out(session: Session) -> None:
    """No client came within the session's timeout: log it, record it, close; the job goes on."""
    record = session.record
    log.warning(
        "rankscope: debug session %s (%s at %s) had no client within %gs; continuing",
        record.id,
        record.label,
        record.location,
        record.timeout or 0.0,
    )
    worker._emit("debug_session_timeout", {"id": record.id, "timeout": record.timeout})
    session.close("timeout")


def open_breakpoint(
    frame: FrameType, *, name: str | None, timeout: float | None, sync: bool
) -> None:
    """Pause the caller's `frame` in pdb until a client attaches and continues, or the timeout
    passes (debugpy_backend.py is the other backend)."""
    try:
        session = open_session(
            frame, reason="breakpoint", name=name, backend="pdb", timeout=timeout, sync_ranks=sync
        )
        io = session.wait_for_client()
        if io is None:
            timed_out(session)
            return
        debugger = RemotePdb(io, on_end=lambda: session.close("continued"))
        debugger.message(_banner(session.record))
    except Exception as exc:  # never let a debug session break the job
        log.warning("rankscope: breakpoint skipped: %s: %s", type(exc).__name__, exc)
        return
    debugger.set_trace(frame)  # the last call: pdb stops at the caller's next line


def serve_post_mortem(
    exc: BaseException, tb: TracebackType | None, *, timeout: float | None
) -> None:
    """A session at the raising frame of `exc`; returns when the client continues or on timeout."""
    if tb is None:
        return
    inner = tb
    while inner.tb_next is not None:
        inner = inner.tb_next
    session = open_session(
        inner.tb_frame,
        reason="post-mortem",
        name=None,
        backend="pdb",
        timeout=timeout,
        sync_ranks=False,
        exception=f"{type(exc).__name__}: {exc}",
    )
    try:
        io = session.wait_for_client()
        if io is None:
            timed_out(session)
            return

        def finish() -> None:
            io.write("rankscope: the exception continues to propagate\n")
            session.close("continued")

        debugger = RemotePdb(io, on_end=finish)
        debugger.message(_banner(session.record))
        debugger.reset()
        debugger.interaction(None, tb)
        debugger.end()
    finally:
        session.close("continued")


def _banner(record: DebugSession) -> str:
    what = f"{record.reason}: {record.exception}" if record.exception else record.reason
    return (
        f"rankscope: attached to {record.label} (pid {record.pid} on "
        f"{record.node_ip or record.hostname}), {what} at {record.location} in {record.function}"
        "\nrankscope: `c` continues the process; `q` or Ctrl-D detaches and continues"
    )
