"""Debug session records: what a paused process tells the registry, and the CLI reads."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class SessionFrame:
    """One frame of a paused process's stack, innermost first."""

    function: str
    filename: str
    lineno: int

    @property
    def location(self) -> str:
        return f"{os.path.basename(self.filename)}:{self.lineno}"


@dataclass(frozen=True)
class DebugSession:
    """One paused process waiting for (or talking to) a debugger client."""

    id: str
    job_id: str
    rank: int | None
    world_size: int | None
    node_id: str
    node_ip: str
    hostname: str
    pid: int
    actor_class: str | None
    probe_id: str
    host: str
    """The address the session listens on: 127.0.0.1 unless RANKSCOPE_DEBUG_EXTERNAL=1."""
    port: int
    backend: str
    """`pdb` (a terminal over TCP) or `debugpy` (an IDE such as VS Code)."""
    reason: str
    """`breakpoint` or `post-mortem`."""
    name: str | None
    filename: str
    lineno: int
    function: str
    stack: tuple[SessionFrame, ...]
    since: float
    timeout: float | None
    """Seconds the session waits for a client before the process continues; None: forever."""
    state: str
    """`waiting` for a client, or `attached`."""
    sync: bool
    """The other ranks of the job wait at their next rankscope call while this one is paused."""
    cwd: str
    exception: str = ""
    """`ValueError: boom` for post-mortem sessions."""
    refused: int = 0
    """Connections refused so far (wrong or missing token)."""
    token: str = ""
    """Given only to `rankscope debug attach`; empty in listings."""

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}@{self.hostname}"

    @property
    def location(self) -> str:
        return f"{os.path.basename(self.filename)}:{self.lineno}"

    @property
    def external(self) -> bool:
        return self.host != LOOPBACK

    def public(self) -> DebugSession:
        """The record without its token, for listings."""
        return replace(self, token="")


@dataclass(frozen=True)
class SessionListing:
    """The open sessions of one job, and the processes that did not answer in time."""

    job_id: str
    sessions: tuple[DebugSession, ...]
    unanswered: tuple[str, ...]
    """Labels of live processes whose probe did not answer in time."""
    unanswered_probe_ids: tuple[str, ...]
    dead_probe_ids: tuple[str, ...]


@dataclass(frozen=True)
class AttachRoute:
    """How this terminal reaches a session."""

    tunnel: bool
    """True: relay through a Ray actor on the session's node (its port is on loopback there)."""
    host: str
    port: int
    direct_command: str
    """What to run, and where, to connect without the tunnel."""


@dataclass(frozen=True)
class AttachCommands:
    """How to attach to one session, as `debug list --json` says it."""

    command: str
    tunnel: bool
    """True: `command` relays through a Ray actor on the session's node."""
    direct: str
    """What to run, and where, to connect without the tunnel."""
    vscode: dict[str, Any] | None
    """A VS Code launch.json "attach" configuration, for a debugpy session."""


@dataclass(frozen=True)
class DebugList:
    """`rankscope debug list`: every selected job's open sessions, and how to attach to each
    from this machine."""

    jobs: tuple[SessionListing, ...]
    attach: dict[str, AttachCommands]
    """By session id."""
    routes: dict[str, AttachRoute] = field(default_factory=dict, metadata={"json": False})
    """By session id, for the text view (`attach` says the same in JSON)."""
