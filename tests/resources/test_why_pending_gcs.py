"""why-pending on the session cluster, which runs without Ray's dashboard (tests/conftest.py).

Ray's state API is served by the dashboard; without it why-pending reads actors and placement
groups from the GCS and says in one line that tasks are left out. The demo's `pending-actor`
fault decides on the same report (`the_actor`), tested here without training a job.
"""

from __future__ import annotations

import json

import ray

from helpers.cluster import run_cli
from helpers.workers import WORKER_NODE_RESOURCE, wait_until

NOTE = "pending and running tasks left out"


def _why_pending(cluster, *args: str):
    return run_cli("why-pending", *args, env={"RAY_ADDRESS": cluster.address})


def _listed(*names: str) -> bool:
    """Whether the GCS already lists these pending demands (it registers actors async)."""
    from rankscope.resources.collect import read_demands

    pending = {d.name.rsplit(".", 1)[-1] for d in read_demands().demands}
    return set(names) <= pending


def _verdict(data: dict, name: str) -> dict:
    for v in data["verdicts"]:
        if (v["demand"]["name"] or "").rsplit(".", 1)[-1] == name:
            return v
    raise AssertionError(
        f"{name} is not pending: {[v['demand']['name'] for v in data['verdicts']]}"
    )


def test_an_actor_asking_more_cpus_than_any_node_is_named_with_the_missing_cpus(cluster):
    @ray.remote(num_cpus=0)
    class NeedsSixteenCpus:
        pass

    actor = NeedsSixteenCpus.options(num_cpus=16).remote()  # the head has 6, the worker 4
    try:
        wait_until(lambda: _listed("NeedsSixteenCpus"), what="the actor in the GCS")
        done = _why_pending(cluster)
    finally:
        ray.kill(actor)
    out = " ".join(done.stdout.split())
    assert done.returncode == 1, done.stdout + done.stderr  # something can never be scheduled
    assert "infeasible actor NeedsSixteenCpus (" in out, out
    assert "asks {CPU: 16}: no node could ever fit it" in out
    assert "needs 16, has 6 (short by 10)" in out  # the closest node: the head
    assert "note: read from Ray's GCS (the cluster runs without its dashboard)" in out
    assert NOTE in out


def test_a_waiting_actor_names_the_alive_actor_that_holds_what_it_needs(cluster):
    from ray.util.placement_group import placement_group, remove_placement_group

    @ray.remote(num_cpus=0)
    class Holder:
        def ready(self) -> bool:
            return True

    @ray.remote(num_cpus=0)
    class Waiter:
        pass

    holder = Holder.options(resources={WORKER_NODE_RESOURCE: 60}).remote()
    ray.get(holder.ready.remote(), timeout=120)
    waiter = Waiter.options(resources={WORKER_NODE_RESOURCE: 60}).remote()  # 100 on the node
    group = placement_group([{"CPU": 0.01}] * 3, strategy="STRICT_SPREAD", name="spread3")
    try:
        wait_until(lambda: _listed("Waiter", "spread3"), what="the demands in the GCS")
        done = _why_pending(cluster, "--json")
    finally:
        ray.kill(waiter)
        ray.kill(holder)
        remove_placement_group(group)
    assert done.returncode == 1, done.stdout + done.stderr
    data = json.loads(done.stdout)["data"]
    assert len(data["notes"]) == 1 and NOTE in data["notes"][0]
    waiting = _verdict(data, "Waiter")
    assert waiting["verdict"] == "waiting", waiting["reason"]
    assert [h["name"].rsplit(".", 1)[-1] for h in waiting["holders"]] == ["Holder"]
    assert WORKER_NODE_RESOURCE in waiting["reason"] and "Holder" in waiting["reason"]
    spread = _verdict(data, "spread3")
    assert spread["verdict"] == "infeasible"
    assert "STRICT_SPREAD: each bundle on its own node" in spread["reason"]


def test_the_demo_s_pending_actor_is_found_as_its_diagnosis_decides(cluster):
    """`--fault pending-actor`'s decision, on the report why-pending builds, without a job."""
    from rankscope.demo.fault_pending_actor import CPU_FACTOR, Evaluator, the_actor
    from rankscope.resources.collect import cluster_nodes, pending_report

    largest = max(n.total.get("CPU", 0.0) for n in cluster_nodes() if n.alive)
    job_id = ray.get_runtime_context().get_job_id()
    actor = ray.remote(Evaluator).options(num_cpus=int(largest) * CPU_FACTOR).remote()
    try:
        verdict = wait_until(
            lambda: the_actor(pending_report(None), job_id), what="the Evaluator pending"
        )
    finally:
        ray.kill(actor)
    assert verdict.verdict.value == "infeasible", verdict.reason
    assert {s.resource for s in verdict.shortfalls} == {"CPU"}
    assert f"asks {{CPU: {int(largest) * CPU_FACTOR}}}" in verdict.reason


def test_doctor_s_pending_check_reads_the_gcs_when_the_cluster_has_no_dashboard(cluster):
    """`rankscope doctor` beside a job on a cluster without the dashboard: work no node can
    host fails its check (it is not skipped), and the check says how it was read."""
    from rankscope.doctor.preflight.collect_live import PENDING, live_checks
    from rankscope.doctor.preflight.model import Status

    @ray.remote(num_cpus=0)
    class NeedsTwentyCpus:
        pass

    actor = NeedsTwentyCpus.options(num_cpus=20).remote()
    try:
        wait_until(lambda: _listed("NeedsTwentyCpus"), what="the actor in the GCS")
        checks = live_checks(cluster.address, "the cluster runs without it")
    finally:
        ray.kill(actor)
    (check,) = [c for c in checks if c.name == PENDING]
    assert check.status == Status.FAIL, check
    assert NOTE in check.summary, check
    assert any("NeedsTwentyCpus" in what for what in check.evidence), check.evidence
