"""The CLI's side of the runtime: join a cluster, find its hub, ask it things.

Errors a user can cause (no cluster, an address that does not answer, no hub, another
rankscope version on the cluster) come out as `UserError`s whose message says what to do.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from typing import Any

from rankscope._version import __version__
from rankscope.errors import NoClusterError, NoHubError, UserError, VersionMismatchError
from rankscope.runtime.protocol import FanOutResult, HubInfo, ProbeState, ProbeStatus
from rankscope.runtime.selection import select_jobs

CONNECT_TIMEOUT_S = 3.0
HUB_CALL_TIMEOUT_S = 30.0

_HOW_TO_POINT = (
    "start one with `ray start --head` (or run your job), or point at one with "
    "--address HOST:PORT or RAY_ADDRESS"
)


def connect(address: str | None) -> None:
    """Join the Ray cluster at `address` (else RAY_ADDRESS, else a local one) as a client."""
    import ray

    if ray.is_initialized():
        return
    target = address or os.environ.get("RAY_ADDRESS") or "auto"
    if target != "auto":
        _check_reachable(target)
    try:
        ray.init(
            address=target,
            logging_level=logging.ERROR,
            log_to_driver=False,
        )
    except ConnectionError:
        if target == "auto":
            raise NoClusterError(
                f"no Ray cluster is running on this machine: {_HOW_TO_POINT}"
            ) from None
        raise NoClusterError(f"no Ray cluster answers at {target}: {_HOW_TO_POINT}") from None


def _check_reachable(address: str) -> None:
    """Fail in seconds, not minutes, when nothing listens at HOST:PORT."""
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise NoClusterError(f"--address {address!r} is not HOST:PORT (e.g. 10.0.0.5:6379)")
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise NoClusterError(
            f"cannot reach a Ray cluster at {address} ({exc.strerror or exc}): "
            "check the address and that the head node is up"
        ) from None


@dataclass
class HubClient:
    """Typed calls to the hub; build it with `HubClient.attach()`."""

    handle: Any

    @classmethod
    def attach(cls, address: str | None = None, *, check_version: bool = True) -> HubClient:
        """Connect to the cluster and find its hub; never starts a hub."""
        import ray

        from rankscope.runtime.hub import find_hub

        connect(address)
        handle = find_hub()
        if handle is None:
            raise NoHubError(
                "no rankscope hub on this cluster: call rankscope.init() in your workers, or "
                'start them with runtime_env={"worker_process_setup_hook": '
                '"rankscope.setup_worker"}'
            )
        client = cls(handle)
        if check_version:
            hub_version = ray.get(handle.ping.remote(), timeout=HUB_CALL_TIMEOUT_S)
            if hub_version != __version__:
                raise VersionMismatchError(
                    f"the cluster's rankscope hub runs version {hub_version}, this CLI is "
                    f"{__version__}: install rankscope=={hub_version} here, or the same version "
                    "on the cluster"
                )
        return client

    def jobs(self, job_id: str | None = None) -> dict[str, list[ProbeStatus]]:
        """The registered processes of the jobs a command is about (see `select_jobs`).

        Raises when there are none, or when a live probe runs another rankscope version.
        """
        jobs = select_jobs(self.probes(), job_id)
        if not jobs:
            raise UserError(
                "the rankscope hub has no registered processes yet: is the job running, and "
                "does it call rankscope.init() or use the worker_process_setup_hook?"
            )
        for probes in jobs.values():
            check_probe_versions(probes)
        return jobs

    def probes(self, job_id: str | None = None) -> list[ProbeStatus]:
        return self._get(self.handle.list_probes.remote(job_id))

    def events(
        self, job_id: str, kinds: list[str] | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        return self._get(self.handle.read_events.remote(job_id, kinds, limit))

    def info(self) -> HubInfo:
        return self._get(self.handle.info.remote())

    def fan_out(
        self,
        kind: str,
        probes: list[ProbeStatus],
        *,
        args: dict[str, Any] | None = None,
        deadline_s: float | None = None,
    ) -> FanOutResult:
        """Ask `probes` to run `kind`; the hub waits up to `deadline_s` for their replies."""
        ids = [p.info.probe_id for p in probes]
        ref = self.handle.fan_out.remote(kind, args, probe_ids=ids, deadline_s=deadline_s)
        return self._get(ref)

    @staticmethod
    def _get(ref: Any) -> Any:
        import ray

        return ray.get(ref, timeout=HUB_CALL_TIMEOUT_S)


def check_probe_versions(probes: list[ProbeStatus]) -> None:
    """A live probe of another rankscope version would answer in another format: refuse."""
    for p in probes:
        if p.state != ProbeState.DEAD and p.info.version != __version__:
            ctx = p.info.context
            raise VersionMismatchError(
                f"{ctx.label} (pid {ctx.pid} on {ctx.hostname}) runs rankscope "
                f"{p.info.version}, this CLI is {__version__}: install the same version in "
                "the job's environment and here"
            )
