"""Joining a cluster that wants a Ray auth token, and hub calls while the hub restarts.

Ray 2.60 clusters started by `ray.init()` or `ray start --head` want a token, but the session
cluster (`ray.cluster_utils.Cluster`, started without RAY_AUTH_MODE) does not. So the token tests
start a second, one-node cluster that does: its own Ray temp dir, and its own HOME whose
.ray/auth_token holds its token; the machine's ~/.ray/auth_token is shared and never touched.
The CLI runs with RAY_AUTH_MODE, RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH and RAY_ADDRESS removed from
its environment unless a test sets them, as for a user who just has the token file.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import ray
from ray.exceptions import RayActorError

from helpers.cluster import cluster_address, run_cli
from helpers.errors import one_clear_line
from helpers.workers import wait_until
from rankscope.config import Config
from rankscope.errors import HubUnavailableError
from rankscope.runtime.client import HUB_RESTARTING_STATES, HubClient, hub_call_error, hub_state
from rankscope.runtime.hub import Hub, hub_options

AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS")

_TOKEN_CLUSTER = """
import dataclasses, sys, time
import psutil, ray
from ray.cluster_utils import Cluster
from rankscope._version import __version__
from rankscope.config import Config
from rankscope.context import get_context
from rankscope.runtime.hub import get_or_create_hub
from rankscope.runtime.protocol import ProbeInfo, Progress

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
hub = get_or_create_hub(Config.from_env())
context = dataclasses.replace(get_context(), rank=0)  # this process, registered as rank 0
info = ProbeInfo("token-probe", context, __version__, psutil.Process().create_time())
ray.get(hub.register.remote(info, Progress(0, time.time())), timeout=120)
print(cluster.address, flush=True)
sys.stdin.read()  # until the test closes it
ray.shutdown()
cluster.shutdown()
"""


@dataclass
class TokenCluster:
    address: str
    ray_tmpdir: str
    home: str
    """A HOME whose .ray/auth_token holds the cluster's token."""
    token: str
    pid: int
    """The driver process registered at the cluster's hub (as rank 0)."""


@pytest.fixture(scope="module")
def token_cluster(cluster) -> Iterator[TokenCluster]:
    """A one-node cluster that wants a token (RAY_AUTH_MODE=token), with a hub and one probe."""
    base = tempfile.mkdtemp(prefix="rs-tok-", dir="/tmp")
    ray_tmpdir, home = os.path.join(base, "ray"), os.path.join(base, "home")
    os.makedirs(os.path.join(home, ".ray"))
    token = secrets.token_hex(32)
    Path(home, ".ray", "auth_token").write_text(token)
    env = {k: v for k, v in os.environ.items() if k not in AUTH_VARS}
    env.update(RAY_TMPDIR=ray_tmpdir, HOME=home, RAY_AUTH_MODE="token")
    with open(os.path.join(base, "stderr"), "w+") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-c", _TOKEN_CLUSTER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
        )
        assert process.stdin is not None and process.stdout is not None
        try:
            address = process.stdout.readline().strip()
            stderr.seek(0)
            assert address, f"the token cluster did not start: {stderr.read()[-3000:]}"
            yield TokenCluster(address, ray_tmpdir, home, token, process.pid)
        finally:
            process.stdin.close()
            try:
                process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def cli(monkeypatch):
    """`run_cli` with no Ray auth variable or address inherited: only what a test sets."""
    for name in AUTH_VARS:
        monkeypatch.delenv(name, raising=False)
    return run_cli


def _answers_with_its_probe(result, token_cluster: TokenCluster) -> None:
    assert result.returncode in (0, 1), (result.stdout, result.stderr)
    jobs = json.loads(result.stdout)["data"]
    pids = [p["info"]["context"]["pid"] for job in jobs.values() for p in job["processes"]]
    assert token_cluster.pid in pids, result.stdout


def test_address_finds_the_token_in_home(token_cluster, cli):
    """The user's case: ~/.ray/auth_token copied from the head node, `--address`, nothing else."""
    env = {"HOME": token_cluster.home}
    result = cli("status", "--json", "--address", token_cluster.address, env=env)
    _answers_with_its_probe(result, token_cluster)


def test_ray_address_with_the_token_in_RAY_AUTH_TOKEN(token_cluster, cli, tmp_path):
    env = {"RAY_ADDRESS": token_cluster.address, "RAY_AUTH_TOKEN": token_cluster.token}
    result = cli("status", "--json", env={**env, "HOME": str(tmp_path)})
    _answers_with_its_probe(result, token_cluster)


def test_the_local_cluster_found_by_itself(token_cluster, cli):
    env = {"RAY_TMPDIR": token_cluster.ray_tmpdir, "HOME": token_cluster.home}
    _answers_with_its_probe(cli("status", "--json", env=env), token_cluster)


def test_no_token_says_where_to_get_one(token_cluster, cli, tmp_path):
    result = cli("status", "--address", token_cluster.address, env={"HOME": str(tmp_path)})
    one_clear_line(
        result,
        f"the cluster at {token_cluster.address} requires a token",
        "copy ~/.ray/auth_token from its head node",
        "RAY_AUTH_TOKEN",
    )


def test_a_wrong_token_in_RAY_AUTH_TOKEN_is_named(token_cluster, cli):
    env = {"HOME": token_cluster.home, "RAY_AUTH_TOKEN": "not-the-token"}
    result = cli("status", "--address", token_cluster.address, env=env)
    one_clear_line(
        result,
        f"the cluster at {token_cluster.address} refused the token from RAY_AUTH_TOKEN:",
        "set RAY_AUTH_TOKEN to the cluster's token",
    )


def test_a_wrong_token_file_in_RAY_AUTH_TOKEN_PATH_is_named(token_cluster, cli, tmp_path):
    """RAY_AUTH_TOKEN_PATH comes before ~/.ray/auth_token (right here), as in Ray's loader."""
    wrong = tmp_path / "token"
    wrong.write_text("not-the-token\n")
    env = {"HOME": token_cluster.home, "RAY_AUTH_TOKEN_PATH": str(wrong)}
    result = cli("status", "--address", token_cluster.address, env=env)
    one_clear_line(result, f"refused the token from RAY_AUTH_TOKEN_PATH ({wrong})")


def test_an_unreadable_RAY_AUTH_TOKEN_PATH_is_named(token_cluster, cli, tmp_path):
    missing = tmp_path / "no-such-file"
    env = {"HOME": token_cluster.home, "RAY_AUTH_TOKEN_PATH": str(missing)}
    result = cli("status", "--address", token_cluster.address, env=env)
    one_clear_line(result, f"RAY_AUTH_TOKEN_PATH={missing} cannot be read or is empty")


def test_RAY_AUTH_MODE_disabled_wins_and_says_so(token_cluster, cli):
    env = {"HOME": token_cluster.home, "RAY_AUTH_MODE": "disabled"}
    result = cli("status", "--address", token_cluster.address, env=env)
    one_clear_line(result, "requires a token, but RAY_AUTH_MODE='disabled' here")


def test_a_cluster_without_auth_is_joined_without_a_token(hub, token_cluster, cli):
    """A token at hand is not sent to a cluster that wants none (the session cluster)."""
    result = cli("status", "--address", cluster_address(), env={"HOME": token_cluster.home})
    assert "token" not in result.stderr, result.stderr
    no_processes = "the rankscope hub has no registered processes yet" in result.stderr
    assert result.returncode in (0, 1) or no_processes, (result.stdout, result.stderr)


class SlowRestartHub(Hub):
    """The real hub, except that a (re)start waits while the file `hold` exists."""

    def __init__(self, config: Config, hold: str) -> None:
        give_up = time.time() + 90
        while os.path.exists(hold) and time.time() < give_up:
            time.sleep(0.1)
        super().__init__(config)


class Sleeper:
    def __init__(self, hold: str) -> None:
        give_up = time.time() + 90
        while os.path.exists(hold) and time.time() < give_up:
            time.sleep(0.1)

    def ping(self) -> str:
        return "pong"

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def test_a_cli_call_to_a_restarting_hub_says_so(cluster, cli, monkeypatch, tmp_path):
    """A hub killed with restart allowed, held in its restart while the CLI asks it."""
    monkeypatch.setenv("RANKSCOPE_NAMESPACE", f"rs-restart-{uuid.uuid4().hex[:8]}")
    hold = tmp_path / "hold"
    config = Config.from_env()
    handle = ray.remote(SlowRestartHub).options(**hub_options(config)).remote(config, str(hold))
    ray.get(handle.ping.remote(), timeout=60)
    hold.touch()
    ray.kill(handle, no_restart=False)
    try:
        result = cli("status", "--address", cluster_address())
        one_clear_line(result, "the rankscope hub is restarting; try again in a few seconds")
    finally:
        hold.unlink()
        wait_until(lambda: hub_state(handle) == "ALIVE", timeout=60, what="the hub's restart")
        ray.kill(handle)


def test_hub_calls_name_a_busy_a_restarting_and_a_dead_hub(cluster, tmp_path):
    """Real failures of a real actor, through `HubClient._get` and `hub_call_error`."""
    hold = tmp_path / "hold"
    actor = ray.remote(num_cpus=0, max_restarts=-1, max_concurrency=4)(Sleeper)
    handle = actor.remote(str(hold))
    client = HubClient(handle)
    assert client._get(handle.ping.remote()) == "pong"

    with pytest.raises(HubUnavailableError, match="did not answer within 1 s: it is alive but"):
        client._get(handle.sleep.remote(5), timeout_s=1)

    hold.touch()
    ray.kill(handle, no_restart=False)
    wait_until(lambda: hub_state(handle) in HUB_RESTARTING_STATES, what="the restart")
    with pytest.raises(HubUnavailableError, match="restarting; try again in a few seconds"):
        client._get(handle.ping.remote())
    hold.unlink()
    wait_until(lambda: hub_state(handle) == "ALIVE", timeout=60, what="the actor back")

    ray.kill(handle)  # for good
    with pytest.raises(RayActorError) as died:
        ray.get(handle.ping.remote(), timeout=60)
    wait_until(lambda: hub_state(handle) == "DEAD", what="the actor dead in the GCS")
    assert "the rankscope hub is gone" in str(hub_call_error(died.value, "DEAD", 30))
    with pytest.raises(HubUnavailableError, match="the rankscope hub is gone"):
        client._get(handle.ping.remote())
