"""The CLI's side of the runtime: join a cluster, find its hub, ask it things.

Errors a user can cause (no cluster, an address that does not answer, a missing or wrong Ray
auth token, no hub, a hub that is restarting, another rankscope version on the cluster) come out
as `UserError`s whose message says what to do.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rankscope._version import __version__
from rankscope.errors import (
    HubUnavailableError,
    NoClusterError,
    NoHubError,
    UserError,
    VersionMismatchError,
)
from rankscope.runtime.auth import prepare_token_auth
from rankscope.runtime.fan_out import Ask, send_together
from rankscope.runtime.protocol import FanOutResult, HubInfo, ProbeState, ProbeStatus
from rankscope.runtime.selection import select_jobs

CONNECT_TIMEOUT_S = 3.0
HUB_CALL_TIMEOUT_S = 30.0
"""The longest a call to a live hub may take (a fan-out: its deadline more)."""
HUB_RESTART_WAIT_S = 10.0
"""The longest a call waits for a hub that Ray is restarting."""
HUB_POLL_S = 1.0
HUB_RESTARTING_STATES = frozenset({"RESTARTING", "PENDING_CREATION", "DEPENDENCIES_UNREADY"})
HUB_STATE_S = 2.0
"""The longest a look at the hub's state in Ray's GCS may take before it counts as unknown."""

_HOW_TO_POINT = (
    "start one with `ray start --head` (or run your job), or point at one with "
    "--address HOST:PORT or RAY_ADDRESS"
)


def connect(address: str | None) -> None:
    """Join the Ray cluster at `address` (else RAY_ADDRESS, else a local one) as a client.

    With the token the cluster wants, if it wants one (see `runtime.auth`), whichever way the
    address was given: a local cluster is resolved to its address first, so that one rule
    decides for all three.
    """
    import ray

    if ray.is_initialized():
        return
    target = address or os.environ.get("RAY_ADDRESS") or "auto"
    local = target == "auto"
    if local:
        target = _local_cluster()
    _check_reachable(target)
    if "://" not in target:  # ray://: Ray Client, which authenticates its own way
        prepare_token_auth(target)
    try:
        ray.init(
            address=target,
            logging_level=logging.ERROR,
            log_to_driver=False,
        )
    except ConnectionError:
        if local:
            raise NoClusterError(
                f"no Ray cluster is running on this machine: {_HOW_TO_POINT}"
            ) from None
        raise NoClusterError(f"no Ray cluster answers at {target}: {_HOW_TO_POINT}") from None


def _local_cluster() -> str:
    """The address `ray.init(address="auto")` would join (Ray's own lookup), or a clear error."""
    from ray._private import services

    try:
        found = services.canonicalize_bootstrap_address("auto")
    except ConnectionError:
        found = None
    if not found:
        raise NoClusterError(f"no Ray cluster is running on this machine: {_HOW_TO_POINT}")
    return found


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
    _together: list[Ask] | None = field(default=None, init=False, repr=False)
    """Fan-outs started inside `together()` and not sent yet."""

    @classmethod
    def attach(cls, address: str | None = None, *, check_version: bool = True) -> HubClient:
        """Connect to the cluster and find its hub; never starts a hub."""
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
            hub_version = client._get(handle.ping.remote())
            if hub_version != __version__:
                raise VersionMismatchError(
                    f"the cluster's rankscope hub runs version {hub_version}, this CLI is "
                    f"{__version__}: install rankscope=={hub_version} here, or the same version "
                    "on the cluster"
                )
        return client

    def jobs(
        self, job_id: str | None = None, summaries: list[str] | None = None
    ) -> dict[str, list[ProbeStatus]]:
        """The registered processes of the jobs a command is about (see `select_jobs`); live
        ones with only the `summaries` named (all when None; dead ones keep all).

        Raises when there are none, or when a live probe runs another rankscope version.
        """
        jobs = select_jobs(self.probes(summaries=summaries), job_id)
        if not jobs:
            raise UserError(
                "the rankscope hub has no registered processes yet: is the job running, and "
                "does it call rankscope.init() or use the worker_process_setup_hook?"
            )
        for probes in jobs.values():
            check_probe_versions(probes)
        return jobs

    def probes(
        self,
        job_id: str | None = None,
        summaries: list[str] | None = None,
        probe_ids: list[str] | None = None,
    ) -> list[ProbeStatus]:
        """The registry's rows (of `probe_ids` only, when given); live probes with only the
        `summaries` named (all when None)."""
        return self._get(self.handle.list_probes.remote(job_id, summaries, probe_ids))

    def groups(self, job_id: str) -> dict[str, dict[str, tuple[int, ...]]]:
        """The job's process groups as its probes sent them, by worker group ("" when none):
        name -> global ranks."""
        found: dict[str, dict[str, tuple[int, ...]]] = self._get(self.handle.groups.remote(job_id))
        return found

    def events(
        self, job_id: str, kinds: list[str] | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        return self._get(self.handle.read_events.remote(job_id, kinds, limit))

    def reports(self, job_id: str) -> tuple[dict[str, Any], list[str], list[tuple[str, int]]]:
        """The job's JSON reports and files from the run directory, read on the hub's node."""
        return self._get(self.handle.read_reports.remote(job_id))

    def info(self) -> HubInfo:
        return self._get(self.handle.info.remote())

    def write_artifact(self, job_id: str, name: str, text: str) -> str:
        """Write `<run_dir>/<job>/<name>` on the hub's node, atomically; returns its path there."""
        path: str = self._get(self.handle.write_artifact.remote(job_id, name, text))
        return path

    def fan_out(
        self,
        kind: str,
        probes: list[ProbeStatus],
        *,
        args: dict[str, Any] | None = None,
        deadline_s: float | None = None,
    ) -> FanOutResult:
        """Ask `probes` to run `kind`; the hub waits up to `deadline_s` for their replies."""
        return self.start_fan_out(kind, probes, args=args, deadline_s=deadline_s)()

    def start_fan_out(
        self,
        kind: str,
        probes: list[ProbeStatus],
        *,
        args: dict[str, Any] | None = None,
        deadline_s: float | None = None,
    ) -> Callable[[], FanOutResult]:
        """As `fan_out`, but returns at once; call what it returns for the result.

        Probes that poll through a node relay are asked through their relays directly, one
        call per relay (`Hub.fan_out_routes`); the hub takes only the others. Inside
        `together()` the fan-out goes out with the others started there."""
        ask = Ask(kind, args, probes, deadline_s)
        if self._together is None:
            self._send([ask])
        else:
            self._together.append(ask)

        def result() -> FanOutResult:
            if ask.result is None:
                self._send_together()
            if ask.result is None:  # its `together` block ended in an error before it went
                self._send([ask])
            reader = ask.result
            assert reader is not None  # `_send` sets it
            return reader()

        return result

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        """Fan-outs started in this block go out as one when the first one's result is read
        (or the block ends): a probe gets them in one poll, a relay in one call, and they come
        back together (at 4,096 ranks each round trip is a second or more)."""
        if self._together is not None:  # nested: the outer block sends them
            yield
            return
        self._together = []
        try:
            yield
            self._send_together()
        finally:  # on an error the ones not sent yet are dropped
            self._together = None

    def _send_together(self) -> None:
        if self._together:
            asks, self._together[:] = list(self._together), []
            self._send(asks)

    def _send(self, asks: list[Ask]) -> None:
        send_together(self.handle, asks, self._get_fan_out, HUB_CALL_TIMEOUT_S)

    def _get_fan_out(self, ref: Any, timeout_s: float) -> Any:
        """A fan-out's answer: a restarting hub fails it at once, as the fan-out (and its
        registry) went with the old hub; waiting for the new one would only outlast the
        command's deadline."""
        return self._get(ref, timeout_s, restart_wait_s=0.0)

    def _get(
        self,
        ref: Any,
        timeout_s: float = HUB_CALL_TIMEOUT_S,
        *,
        restart_wait_s: float = HUB_RESTART_WAIT_S,
    ) -> Any:
        """The call's result; a hub that is restarting, gone or too slow raises one clear line.

        Waits up to `timeout_s` for a live hub, and up to `restart_wait_s` for one that Ray
        is restarting (it restarts the hub, `max_restarts=-1`, with its state lost).
        """
        import ray
        from ray.exceptions import RayActorError

        start = time.monotonic()
        restarting_since: float | None = None
        while True:
            left = timeout_s - (time.monotonic() - start)
            ready, _ = ray.wait([ref], timeout=max(0.0, min(HUB_POLL_S, left)))
            if ready:
                try:
                    return ray.get(ref)
                except RayActorError as exc:
                    raise hub_call_error(exc, hub_state(self.handle), timeout_s) from None
            now = time.monotonic()
            state = hub_state(self.handle)
            if state in HUB_RESTARTING_STATES:
                restarting_since = now if restarting_since is None else restarting_since
            else:
                restarting_since = None
            if (
                state == "DEAD"
                or now - start >= timeout_s
                or (restarting_since is not None and now - restarting_since >= restart_wait_s)
            ):
                raise hub_call_error(None, state, timeout_s)


def hub_state(handle: Any) -> str | None:
    """The hub actor's state in Ray's GCS (ALIVE, RESTARTING, DEAD, ...), None if unknown or
    not known within `HUB_STATE_S`: the GCS query has no deadline of its own, and while the
    main thread waits in it no Python runs there (not even Ctrl-C's handler), so it is asked
    on a thread of its own."""
    found: list[str | None] = [None]

    def look() -> None:
        found[0] = _hub_state_now(handle)

    thread = threading.Thread(target=look, name="rankscope-hub-state", daemon=True)
    thread.start()
    thread.join(HUB_STATE_S)
    return found[0]


def _hub_state_now(handle: Any) -> str | None:
    try:  # best effort: the GCS's actor table through Ray's private state module
        from ray._private import state

        info = state.actors(handle._actor_id.hex())
    except Exception:
        return None
    return str(info["State"]) if isinstance(info, dict) and info.get("State") else None


def hub_call_error(error: Exception | None, state: str | None, timeout_s: float) -> UserError:
    """The one line for a hub call that failed (`error`, a RayActorError) or got no answer (None).

    `state` is the hub's state in the GCS after the failure. Ray fails calls to a restarting
    actor with ActorUnavailableError; a call lost in a restart can also end in another
    RayActorError while the actor is already back (ALIVE) or still restarting.
    """
    from ray.exceptions import ActorUnavailableError

    restarting = state in HUB_RESTARTING_STATES
    back = error is not None and state == "ALIVE"
    if isinstance(error, ActorUnavailableError) or restarting or back:
        return HubUnavailableError("the rankscope hub is restarting; try again in a few seconds")
    if error is not None or state == "DEAD":
        return HubUnavailableError(
            "the rankscope hub is gone (killed, or its node died): the job's probes start a new "
            "one within seconds; try again then"
        )
    return HubUnavailableError(
        f"the rankscope hub did not answer within {timeout_s:g} s: it is alive but busy; try "
        "again in a moment"
    )


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
