"""Forming one gloo group out of Ray actors: rank 0 picks a port on its node, every rank joins."""

from __future__ import annotations

import socket
from datetime import timedelta


class GlooMember:
    """Mixin for a Ray actor that is one rank of a gloo group (set `rank`, `world_size`)."""

    rank: int
    world_size: int
    join_timeout_s: float = 600.0
    """The group's timeout for every collective, as init_process_group takes it."""

    def address(self) -> tuple[str, int]:
        """Called on rank 0: its node's address and a free port for the rendezvous."""
        with socket.socket() as s:
            s.bind(("", 0))
            return socket.gethostbyname(socket.gethostname()), s.getsockname()[1]

    def join(self, host: str, port: int) -> None:
        import torch.distributed as dist

        dist.init_process_group(
            "gloo",
            init_method=f"tcp://{host}:{port}",
            rank=self.rank,
            world_size=self.world_size,
            timeout=timedelta(seconds=self.join_timeout_s),
        )
