"""One incident as a real job on a local cluster: its driver started, its symptom awaited, the
job torn down with what it left running. Shared by `rankscope demo --client` and the benchmark.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from rankscope.demo.incidents.common import NODE_RESOURCE, Incident

CLUSTER_CPUS = 8
"""Logical CPUs of the one cluster: a job's 4 ranks and its helpers fit, two cores or not."""
SYMPTOM_WAIT_S = 240.0
"""A job's start-up at most (workers import torch on two loaded cores), before its symptom."""


def cluster_env(tmp: str, webhook_url: str = "") -> None:
    """Before the cluster starts: its workers and the drivers inherit these. Ray's files go
    under `tmp` unless RAY_TMPDIR says where (a socket's path must stay under 108 bytes)."""
    os.environ.setdefault("RAY_TMPDIR", tmp)
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ.pop("RAY_ADDRESS", None)
    os.environ["RANKSCOPE_RUN_DIR"] = os.path.join(tmp, "runs")
    if webhook_url:
        os.environ["RANKSCOPE_ALERT_WEBHOOK"] = webhook_url
    os.environ["OMP_NUM_THREADS"] = "1"


def start_cluster() -> Any:
    """A head node of `CLUSTER_CPUS`; a node-lost incident adds (and loses) a second."""
    from ray.cluster_utils import Cluster

    return Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": CLUSTER_CPUS, "include_dashboard": False},
    )


@dataclass
class JobRun:
    """A started incident: its driver, its directory, its Ray job id ("" if it never said)."""

    incident: Incident
    cluster: Any
    job_dir: str
    driver: subprocess.Popen[str]
    job_id: str
    launched: float
    node: Any = None

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def wait_symptom(self) -> float | None:
        """When the faulty rank marked its symptom; None if the job ended or never got there."""
        symptom = os.path.join(self.job_dir, "symptom")
        deadline = time.time() + SYMPTOM_WAIT_S
        while not os.path.exists(symptom):
            if time.time() > deadline or self.driver.poll() is not None:
                return None
            time.sleep(0.2)
        with open(symptom) as f:
            return float(f.read())


def launch(incident: Incident, cluster: Any, tmp: str) -> JobRun:
    """Starts the incident's driver (`python -m rankscope.demo.incidents.driver`) as its user
    would start the job; a node-lost incident gets its second node first."""
    job_dir = os.path.join(tmp, "jobs", incident.name)
    os.makedirs(job_dir)
    node = None
    if incident.node:  # a second node, lost once the faulty rank runs there
        node = cluster.add_node(num_cpus=2, resources={NODE_RESOURCE: 4})
        cluster.wait_for_nodes()
        threading.Thread(target=_lose_node, args=(cluster, node, job_dir), daemon=True).start()
    launched = time.time()
    command = [sys.executable, "-m", "rankscope.demo.incidents.driver"]
    with open(os.path.join(job_dir, "driver.log"), "w") as log:
        driver = subprocess.Popen(
            [*command, incident.name, cluster.address, job_dir],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
        )
    assert driver.stdout is not None
    job_id = driver.stdout.readline().strip()
    threading.Thread(target=_keep_output, args=(driver, job_dir), daemon=True).start()
    return JobRun(incident, cluster, job_dir, driver, job_id, launched, node)


def _keep_output(driver: subprocess.Popen[str], job_dir: str) -> None:
    """The driver's last words (`done`, or the error the job raised) into its driver.log."""
    assert driver.stdout is not None
    with open(os.path.join(job_dir, "driver.log"), "a") as log:
        for line in driver.stdout:
            log.write(f"[driver] {line}")
            log.flush()


def _lose_node(cluster: Any, node: Any, job_dir: str) -> None:
    """When the rank on the added node says it trains there: the node goes, as a host dies."""
    ready = os.path.join(job_dir, "node_ready")
    deadline = time.time() + SYMPTOM_WAIT_S
    while not os.path.exists(ready):
        if time.time() > deadline or os.path.exists(os.path.join(job_dir, "stop")):
            return
        time.sleep(0.2)
    symptom = os.path.join(job_dir, "symptom")
    with open(symptom + ".tmp", "w") as f:
        f.write(repr(time.time()))
    os.replace(symptom + ".tmp", symptom)
    cluster.remove_node(node, allow_graceful=False)


def tear_down(run: JobRun) -> None:
    """Ends the job: its driver (Ray then ends the actors it owns) and what it left running:
    the stalled rank's orphaned child, the out-of-memory kill's cgroup, the added node."""
    with open(os.path.join(run.job_dir, "stop"), "w") as f:
        f.write("stop")
    if run.incident.healthy:  # a healthy job ends its steps itself
        with contextlib.suppress(subprocess.TimeoutExpired):
            run.driver.wait(timeout=30)
    if run.driver.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.driver.pid, signal.SIGKILL)
    run.driver.wait()
    child = os.path.join(run.job_dir, "child.pid")
    if os.path.exists(child):
        with open(child) as f, contextlib.suppress(ValueError, ProcessLookupError):
            os.kill(int(f.read().strip()), signal.SIGKILL)
    cgroup = os.path.join(run.job_dir, "oom.cgroup")
    if os.path.exists(cgroup):
        with open(cgroup) as f:
            _remove_cgroup(f.read().strip())
    if run.node is not None and run.node in run.cluster.worker_nodes:
        run.cluster.remove_node(run.node, allow_graceful=False)
    time.sleep(1.5)  # Ray ends the job's workers


def _remove_cgroup(path: str) -> None:
    """The out-of-memory kill's own memory cgroup, once its process has gone."""
    for _ in range(20):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:  # its process is still going
            time.sleep(0.5)
