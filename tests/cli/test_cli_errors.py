"""Bad input: one line that says what to do, exit code 2, no traceback unless --debug."""

from __future__ import annotations

import dataclasses
import subprocess
import tempfile
import time

import psutil
import pytest
import ray
from typer.testing import CliRunner

import rankscope.cli.main as cli
from helpers.cluster import cluster_address, probes_by_pid, run_cli
from helpers.errors import one_clear_line
from helpers.workers import wait_until
from rankscope.context import get_context
from rankscope.runtime.protocol import ProbeInfo, ProbeState, Progress


def test_bad_rank_spec():
    result = run_cli("stacks", "--ranks", "0,3-x")
    one_clear_line(result, "--ranks '0,3-x'", "'3-x' is not a rank or a range", "0,3-5")


def test_unreachable_address():
    result = run_cli("status", "--address", "127.0.0.1:9")
    one_clear_line(result, "cannot reach a Ray cluster at 127.0.0.1:9")


@pytest.mark.before_cluster
def test_no_cluster_running_says_how_to_point_at_one():
    with tempfile.TemporaryDirectory(prefix="rs-none-", dir="/tmp") as empty:
        result = run_cli("stacks", env={"RAY_TMPDIR": empty})
    one_clear_line(result, "no Ray cluster is running", "--address", "RAY_ADDRESS")


def test_no_hub(cluster):
    result = run_cli(
        "status", "--address", cluster_address(), env={"RANKSCOPE_NAMESPACE": "nobody-here"}
    )
    one_clear_line(result, "no rankscope hub on this cluster", "rankscope.setup_worker")


def test_debug_shows_the_traceback():
    result = run_cli("--debug", "stacks", "--ranks", "x")
    assert result.returncode != 0
    assert "Traceback" in result.stderr and "BadRankSpec" in result.stderr


def test_probe_of_another_version_is_refused(hub):
    """A real registration, for a live process, by a probe claiming an older rankscope."""
    process = subprocess.Popen(["sleep", "60"])
    context = dataclasses.replace(get_context(), job_id="ffff0000", rank=0, pid=process.pid)
    info = ProbeInfo("old-probe", context, "0.0.1", psutil.Process(process.pid).create_time())
    ray.get(hub.register.remote(info, Progress(0, time.time())))
    try:
        result = CliRunner().invoke(cli.app, ["status", "--job", "ffff0000"])
    finally:
        process.kill()
        process.wait()
    assert result.exit_code == 2
    assert "runs rankscope 0.0.1, this CLI is" in result.output
    assert "install the same version" in result.output
    wait_until(  # leave no live stranger behind for the other tests
        lambda: probes_by_pid([process.pid])[process.pid].state == ProbeState.DEAD,
        what="the old probe to be seen dead",
    )


def test_unknown_job(hub):
    result = CliRunner().invoke(cli.app, ["stacks", "--job", "deadbeef"])
    assert result.exit_code == 2
    assert "--job deadbeef: no such job registered" in result.output
