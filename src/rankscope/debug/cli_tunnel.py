"""Reaching a session bound to another node's loopback: a Ray actor on that node relays bytes."""

from __future__ import annotations

import select
import socket
from typing import Any, Protocol

RELAY_STARTUP_S = 60.0
RECV_BYTES = 65536


class Connection(Protocol):
    def send(self, data: bytes) -> None: ...

    def recv(self, wait_s: float) -> bytes | None:
        """Bytes, b"" when the other side closed, None when nothing came within `wait_s`."""
        ...

    def close(self) -> None: ...


class SocketConnection:
    """A direct TCP connection (same node, or a session bound to its node's address)."""

    def __init__(self, host: str, port: int, timeout: float = 5.0) -> None:
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._sock.settimeout(None)

    def send(self, data: bytes) -> None:
        self._sock.sendall(data)

    def recv(self, wait_s: float) -> bytes | None:
        return _recv(self._sock, wait_s)

    def close(self) -> None:
        self._sock.close()


class Relay(SocketConnection):
    """Runs on the session's node (a Ray actor); connects to the session's loopback port."""


class RelayConnection:
    """The client side of a `Relay`: the same calls, each one a Ray actor call."""

    def __init__(self, node_id: str, host: str, port: int) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        actor: Any = ray.remote(Relay)
        self._ray = ray
        self._actor = actor.options(
            num_cpus=0,
            max_concurrency=4,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote(host, port)
        ray.get(self._actor.__ray_ready__.remote(), timeout=RELAY_STARTUP_S)

    def send(self, data: bytes) -> None:
        self._ray.get(self._actor.send.remote(data), timeout=30.0)

    def recv(self, wait_s: float) -> bytes | None:
        result: bytes | None = self._ray.get(self._actor.recv.remote(wait_s), timeout=wait_s + 30.0)
        return result

    def close(self) -> None:
        try:
            self._ray.get(self._actor.close.remote(), timeout=10.0)
        finally:
            self._ray.kill(self._actor)


def _recv(sock: socket.socket, wait_s: float) -> bytes | None:
    ready, _, _ = select.select([sock], [], [], wait_s)
    if not ready:
        return None
    try:
        return sock.recv(RECV_BYTES)
    except OSError:
        return b""
