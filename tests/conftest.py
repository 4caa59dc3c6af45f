"""One real Ray cluster (two nodes) for the whole session; Ray's files under a temp dir.

Tests that start no Ray form the pure tier (`pytest -m "not ray"`, `make check`): a test that
uses the `cluster` fixture, or sits in a module whose source starts Ray another way, is marked
`ray` here, so nobody has to remember the marker; only a test that starts Ray where its source
does not show it carries `@pytest.mark.ray` itself. A test left unmarked that initializes Ray
in this process fails.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

# Before Ray is imported anywhere: these reach every worker the cluster starts.
_RAY_TMP = tempfile.mkdtemp(prefix="rs-", dir="/tmp")
os.environ["RAY_TMPDIR"] = _RAY_TMP
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RANKSCOPE_HEARTBEAT_INTERVAL"] = "0.25"
# Ray's log monitor lists the session's log directory every 0.1 s below 1,000 files (one or
# two per worker process, hundreds in a session): every 0.5 s instead. The tests read no
# worker output through the driver (`log_to_driver=False`).
os.environ["RAY_LOG_MONITOR_MANY_FILES_THRESHOLD"] = "0"
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

# In this process Ray starts only where a test asks for it (`ray.init`, the `cluster` fixture),
# never as a side effect of a Ray call (`ray.get_actor` starts a local cluster when none is up):
# Ray reads the switch once, at import, and the workers and subprocesses never see it.
_AUTO_CONNECT = os.environ.get("RAY_ENABLE_AUTO_CONNECT")
os.environ["RAY_ENABLE_AUTO_CONNECT"] = "0"
import ray  # noqa: E402

if _AUTO_CONNECT is None:
    del os.environ["RAY_ENABLE_AUTO_CONNECT"]
else:
    os.environ["RAY_ENABLE_AUTO_CONNECT"] = _AUTO_CONNECT

import pytest  # noqa: E402

from helpers.workers import WORKER_NODE_RESOURCE  # noqa: E402

# Source that starts Ray without the session's `cluster` fixture: a cluster of its own
# (`Cluster(...)`, `ray.init(...)`, here or in a script it runs) or `rankscope demo`'s.
_STARTS_RAY = re.compile(r"\bray\.init\(|\bCluster\(|\brun_demo\(|\bray start\b")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "before_cluster: needs no Ray cluster on this machine; runs first"
    )
    config.addinivalue_line(
        "markers", "ray: starts Ray (set by conftest.py); the pure tier is -m 'not ray'"
    )
    config.addinivalue_line(
        "markers",
        "alone: judges the ranks' pace (stragglers, drift, late arrivals); make test runs it "
        "alone on the machine, after the tests it runs two at a time",
    )


def _starts_ray(item: pytest.Item, sources: dict[Path, bool]) -> bool:
    if "cluster" in getattr(item, "fixturenames", ()):
        return True
    path = Path(item.path)
    if path not in sources:
        sources[path] = bool(_STARTS_RAY.search(path.read_text()))
    return sources[path]


WHOLE_JOBS = ("clients", "demo")
"""Folders whose tests run whole jobs on real clients or the demo: the longest files."""


def _order(item: pytest.Item) -> tuple[bool, int]:
    """Tests of "no cluster" first (Ray finds any running cluster on the machine); then the
    longest files first, so that make test's processes, handed a file at a time, end together:
    whole jobs, the other cluster tests, and the pure tests last, short fillers."""
    weight = 0 if Path(item.path).parent.name in WHOLE_JOBS else 1
    return item.get_closest_marker("before_cluster") is None, weight + (
        item.get_closest_marker("ray") is None
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks the tests that start Ray, and orders them (`_order`)."""
    sources: dict[Path, bool] = {}
    for item in items:
        if _starts_ray(item, sources):
            item.add_marker(pytest.mark.ray)
    items.sort(key=_order)


@pytest.fixture(autouse=True)
def _pure_tests_start_no_ray(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test left unmarked that started Ray in this process fails, naming the way out."""
    was_up = ray.is_initialized()
    yield
    if not was_up and ray.is_initialized() and not request.node.get_closest_marker("ray"):
        pytest.fail(
            f"{request.node.nodeid} started Ray without the `cluster` fixture: mark it "
            "@pytest.mark.ray (or teach conftest.py's _STARTS_RAY), so the pure tier leaves it out"
        )


@pytest.fixture(scope="session")
def cluster() -> Iterator[object]:
    """A head node and a worker node (tagged with a custom resource) on this machine."""
    from ray.cluster_utils import Cluster

    # No log monitor: it streams workers' output to drivers, which here read none
    # (`log_to_driver=False`; rankscope reads the workers' log files itself), and it cost
    # 10-20 s of CPU per session listing and reading hundreds of them.
    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 6, "include_dashboard": False, "include_log_monitor": False},
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
