"""One real Ray cluster (two nodes) for the whole session; Ray's files under a temp dir."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

# Before Ray is imported anywhere: these reach every worker the cluster starts.
_RAY_TMP = tempfile.mkdtemp(prefix="rs-", dir="/tmp")
os.environ["RAY_TMPDIR"] = _RAY_TMP
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RANKSCOPE_HEARTBEAT_INTERVAL"] = "0.25"
os.environ["RANKSCOPE_DEAD_AFTER"] = "2"
os.environ["RANKSCOPE_RUN_DIR"] = os.path.join(_RAY_TMP, "runs")
os.environ.pop("RAY_ADDRESS", None)
# Workers import the code their actors run by module name: the shared `helpers.workers` (from
# tests/) and, for an actor a test module defines, that module's name. pytest imports a test
# file by its basename from its own folder (so basenames stay unique across folders): every
# folder that holds test files goes on the workers' path too.
_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
_TEST_FOLDERS = sorted(str(d) for d in Path(_TESTS_DIR).iterdir() if any(d.glob("test_*.py")))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (_TESTS_DIR, *_TEST_FOLDERS, os.environ.get("PYTHONPATH")) if p
)

import pytest  # noqa: E402

from helpers.workers import WORKER_NODE_RESOURCE  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "before_cluster: needs no Ray cluster on this machine; runs first"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Ray finds any running cluster on the machine: tests of "no cluster" run before ours."""
    items.sort(key=lambda item: item.get_closest_marker("before_cluster") is None)


@pytest.fixture(scope="session")
def cluster() -> Iterator[object]:
    """A head node and a worker node (tagged with a custom resource) on this machine."""
    import ray
    from ray.cluster_utils import Cluster

    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 6, "include_dashboard": False},
    )
    c.add_node(num_cpus=4, resources={WORKER_NODE_RESOURCE: 100})
    c.wait_for_nodes()
    ray.init(address=c.address, logging_level="ERROR", log_to_driver=False)
    try:
        yield c
    finally:
        import gc

        import rankscope

        rankscope.shutdown()  # a probe this process started stops before Ray does
        gc.collect()  # refs and handles in garbage cycles go while Ray's core worker is up
        ray.shutdown()
        c.shutdown()
        shutil.rmtree(_RAY_TMP, ignore_errors=True)


@pytest.fixture
def hub(cluster):
    """The cluster's hub, started the way a probe starts it when none is running yet."""
    import ray

    from rankscope.config import Config
    from rankscope.runtime.hub import get_or_create_hub

    handle = get_or_create_hub(Config.from_env())
    ray.get(handle.ping.remote(), timeout=60)
    return handle


@pytest.fixture
def chromium_present() -> None:
    """Skips without Chromium on a laptop; fails in CI, where .ci/run installs it."""
    from helpers.cluster import CHROMIUM

    if os.path.exists(CHROMIUM):
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true but {CHROMIUM} is missing: .ci/run installs Debian's chromium")
    pytest.skip(f"needs Debian's chromium at {CHROMIUM} (apt-get install -y chromium)")
