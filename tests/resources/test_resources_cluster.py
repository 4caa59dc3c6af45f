"""why-pending, the allocator and `memory --by-gpu` on a real cluster with declared GPUs.

The state API lives in Ray's dashboard, which the session cluster (tests/conftest.py) runs
without (why-pending there reads the GCS: tests/resources/test_why_pending_gcs.py), and these
scenarios need declared GPUs, labels and Ray's tasks. So this file is also a script: the
module fixture runs it in a subprocess with its own RAY_TMPDIR, where it starts its own
three-node cluster (a head with the dashboard, a 2-GPU `node_type=gpu_highmem` node, a 1-GPU
node; no real GPUs), plays every scenario once, runs the CLI against it and writes what it saw
to a JSON file the tests read. The session cluster, when it runs, is untouched: two clusters
coexist on one machine (each its own ports and temp dir).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

SCRIPT_TIMEOUT_S = 420


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("resources") / "seen.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_TMPDIR")}
    done = subprocess.run(
        [sys.executable, __file__, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0 and out.exists(), done.stderr[-4000:]
    return json.loads(out.read_text())


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]  # a class defined in a function: main.<locals>.Name


def _verdict(seen: dict, name: str) -> dict:
    verdicts = seen["why_pending"]["data"]["verdicts"]
    for v in verdicts:
        if _short(v["demand"]["name"] or v["demand"]["id"]) == name:
            return v
    raise AssertionError(f"{name} is not pending: {[v['demand']['name'] for v in verdicts]}")


def test_plan_on_the_live_cluster_places_three_on_gpus_and_one_on_cpu(seen):
    placements = seen["plan"]["placements"]
    assert [p["device"] for p in placements] == ["GPU", "GPU", "GPU", "CPU"]
    assert placements[0]["node_id"] == placements[1]["node_id"] == seen["nodes"]["gpu_highmem"]
    assert "cpu_backup" in placements[3]["reason"]


def test_allocate_places_each_bundle_on_its_planned_node(seen):
    planned, placed = seen["allocated"]["planned"], seen["allocated"]["placed"]
    assert planned == placed
    assert planned.count(seen["nodes"]["gpu_highmem"]) == 2


def test_an_actor_asking_three_gpus_is_infeasible_with_the_shortfall(seen):
    assert seen["why_pending_rc"] == 1  # something is infeasible
    assert seen["why_pending"]["data"]["notes"] == []  # the state API answered: tasks read too
    v = _verdict(seen, "NeedsThreeGpus")
    assert v["verdict"] == "infeasible"
    assert any(
        s["resource"] == "GPU" and s["need"] == 3 and s["have"] == 2 for s in v["shortfalls"]
    )


def test_a_fitting_actor_behind_a_holder_is_waiting_and_names_it(seen):
    v = _verdict(seen, "NeedsTwoGpus")
    assert v["verdict"] == "waiting", v["reason"]
    assert "GpuHolder" in [_short(h["name"]) for h in v["holders"]]
    assert "GpuHolder" in v["reason"]


def test_a_strict_pack_group_no_node_fits_is_infeasible(seen):
    v = _verdict(seen, "strict3")
    assert v["verdict"] == "infeasible" and "STRICT_PACK" in v["reason"]


def test_a_task_waiting_for_its_arguments_says_so(seen):
    assert _verdict(seen, "consume")["verdict"] == "pending_args"


def test_memory_by_gpu_shows_the_gpu_with_its_three_co_tenants(seen):
    assert seen["by_gpu_rc"] == 0
    (job,) = seen["by_gpu"]["data"]
    (gpu,) = [g for g in job["gpus"] if g["node"] == seen["nodes"]["one_gpu"]]
    assert [_short(t["actor_class"]) for t in gpu["tenants"]] == ["Tenant"] * 3
    assert sum(t["ray_share"] for t in gpu["tenants"]) == pytest.approx(0.99)
    assert gpu["index"] == 0 and all(t["via"] == "ray" for t in gpu["tenants"])


def test_the_fourth_tenant_waits_for_the_full_gpu_and_names_the_three(seen):
    v = _verdict(seen, "LateTenant")
    assert v["verdict"] == "waiting", v["reason"]
    assert [_short(h["name"]) for h in v["holders"]].count("Tenant") == 3
    assert "GPU is held by" in v["reason"]


def test_allocate_times_out_with_the_why_pending_explanation(seen):
    message = seen["allocate_timeout"]
    assert message.startswith("placement group of 1 bundles not ready within 2s")
    assert "would fit, but GPU is held by" in message
    assert seen["groups_left"] == 0  # the timed-out group was removed


def test_an_unknown_node_type_is_one_line_exit_2(seen):
    rc, stderr = seen["unknown_type"]
    assert rc == 2
    assert stderr.strip().splitlines() == [
        "rankscope: error: unknown node type 'tpu_pod': the cluster's nodes offer gpu_b, "
        "gpu_highmem"
    ]


def test_why_pending_stays_within_the_budget(seen):
    assert seen["cli_seconds"] < 30  # a sanity bound; the speed goal is the benchmark's


def test_doctor_beside_the_live_job_shows_the_shared_gpu_and_the_work_that_fits_nowhere(seen):
    assert seen["doctor_rc"] in (0, 1), seen["doctor"]
    checks = {c["name"]: c for c in seen["doctor"]["checks"]}
    versions = checks["versions in a live job"]
    assert versions["status"] == "ok" and any(k.startswith("job ") for k in versions["evidence"])
    gpus = checks["GPUs shared by a live job"]
    assert gpus["status"] == "ok", gpus  # three at 0.33 on one GPU: within its shares
    (row,) = [v for k, v in gpus["evidence"].items() if seen["nodes"]["one_gpu"][:8] in k]
    assert row.count("Tenant") == 3, row
    pending = checks["work Ray cannot place"]
    assert pending["status"] == "fail", pending
    assert any(
        "NeedsThreeGpus" in k and v.startswith("infeasible") for k, v in pending["evidence"].items()
    ), pending


def test_trace_shows_each_actor_call_once_as_a_ray_task_with_its_worker(seen):
    """Ray's task events (the state API, with the dashboard) in the trace: the traced actor's
    calls, each once, on its own node and worker."""
    trace = seen["trace"]
    assert trace["rc"] in (0, 1), trace["stderr"]
    work = [t for t in trace["tasks"] if t["name"].endswith("work")]
    assert len(work) >= 5, [t["name"] for t in trace["tasks"]]
    ids = [t["args"]["task_id"] for t in work]
    assert len(ids) == len(set(ids))
    assert {(t["args"]["worker_pid"], t["args"]["node_id"]) for t in work} == {
        (trace["pid"], trace["node_id"])
    }


def test_detailed_tracing_shows_each_remote_task_once_on_its_node_and_worker(seen):
    """Plain tasks on two nodes, in workers with no probe: each on a track of its worker."""
    ran, tasks = seen["traced_tasks"]["ran"], seen["traced_tasks"]["tasks"]
    submits, arrows = seen["traced_tasks"]["submits"], seen["traced_tasks"]["arrows"]
    drawn = {t["args"]["task_id"]: (t["args"]["worker_pid"], t["args"]["node_id"]) for t in tasks}
    assert len(drawn) == len(tasks), tasks  # each once
    assert {task_id: (pid, node) for task_id, pid, node in ran}.items() <= drawn.items(), drawn
    assert len({node for _, _, node in ran}) == 2
    # the driver's submissions, each with an arrow to the task's run
    assert sorted(e["args"]["task_id"] for e in submits) == sorted(t for t, _, _ in ran)
    from_driver = {(e["pid"], e["tid"]) for e in submits}
    assert sum((a["pid"], a["tid"]) in from_driver for a in arrows) == len(ran), arrows


# --- the script ----------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rankscope.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def main(out: Path) -> None:
    """Start the cluster, play the scenarios, write what was seen to `out`."""
    import socket

    import ray
    from ray.cluster_utils import Cluster
    from ray.util.placement_group import placement_group

    from rankscope.resources import AllocationTimeout, SmartResourceAllocator
    from rankscope.serialize import plain

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    dashboard_port = sock.getsockname()[1]
    sock.close()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "include_dashboard": True,
            "dashboard_port": dashboard_port,
        },
    )
    seen: dict = {}
    try:
        big = cluster.add_node(num_cpus=2, num_gpus=2, labels={"node_type": "gpu_highmem"})
        one = cluster.add_node(num_cpus=2, num_gpus=1, resources={"gpu_b": 10})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        os.environ["RAY_ADDRESS"] = cluster.address  # the CLI subprocesses' cluster
        seen["nodes"] = {"gpu_highmem": big.node_id, "one_gpu": one.node_id}

        # the allocator case on the live cluster, before anything holds a GPU
        alloc = SmartResourceAllocator(
            min_gpu_memory=4, preferred_node_type="gpu_highmem", fallback_strategy="cpu_backup"
        )
        seen["plan"] = plain(alloc.plan(4, gpus_per_worker=1, cpus_per_worker=0.5))
        # allocate(): a ready group, each bundle on the node the plan chose
        exact = SmartResourceAllocator(preferred_node_type="gpu_highmem")
        planned = exact.plan(3, gpus_per_worker=1, cpus_per_worker=0)
        pg = exact.allocate(3, gpus_per_worker=1, cpus_per_worker=0, timeout_s=60)
        placed = ray.util.placement_group_table(pg)["bundles_to_node_id"]
        seen["allocated"] = {
            "planned": [p.node_id for p in planned.placements],
            "placed": [placed[i] for i in range(3)],
        }
        ray.util.remove_placement_group(pg)

        @ray.remote(num_cpus=0)
        class GpuHolder:
            def ready(self) -> bool:
                return True

        @ray.remote(num_cpus=0)
        class Tenant:
            def __init__(self) -> None:
                import rankscope

                rankscope.init()

            def ready(self) -> bool:
                return True

        @ray.remote(num_cpus=0)
        class NeedsThreeGpus:
            pass

        @ray.remote(num_cpus=0)
        class NeedsTwoGpus:
            pass

        @ray.remote(num_cpus=0)
        class LateTenant:
            pass

        @ray.remote(num_cpus=0, resources={"nowhere": 1})
        def produce() -> int:
            return 1

        @ray.remote(num_cpus=0)
        def consume(x: int) -> int:
            return x

        holder = GpuHolder.options(num_gpus=2, label_selector={"node_type": "gpu_highmem"}).remote()
        tenants = [Tenant.options(num_gpus=0.33, resources={"gpu_b": 1}).remote() for _ in range(3)]
        ray.get([holder.ready.remote(), *(t.ready.remote() for t in tenants)], timeout=180)
        pending = [
            NeedsThreeGpus.options(num_gpus=3).remote(),
            NeedsTwoGpus.options(num_gpus=2).remote(),
            LateTenant.options(num_gpus=0.33, resources={"gpu_b": 1}).remote(),
            consume.options(name="consume").remote(produce.remote()),
        ]
        strict = placement_group([{"GPU": 1}] * 3, strategy="STRICT_PACK", name="strict3")

        try:
            SmartResourceAllocator(fallback_strategy="wait", measure_gpu_memory=False).allocate(
                1, gpus_per_worker=1, cpus_per_worker=0, timeout_s=2
            )
        except AllocationTimeout as exc:
            seen["allocate_timeout"] = str(exc)
        table = ray.util.placement_group_table()
        seen["groups_left"] = sum(
            1 for g in table.values() if g["state"] != "REMOVED" and g["name"] != "strict3"
        )

        time.sleep(1.0)  # the state API's task events are flushed every second
        started = time.monotonic()
        done = _cli("why-pending", "--json")
        seen["cli_seconds"] = time.monotonic() - started
        seen["why_pending_rc"] = done.returncode
        seen["why_pending"] = json.loads(done.stdout) if done.stdout.strip() else done.stderr
        seen["why_pending_text"] = _cli("why-pending").stdout

        deadline = time.monotonic() + 30  # the tenants' probes register with the hub
        while True:
            done = _cli("memory", "--by-gpu", "--json")
            data = json.loads(done.stdout)["data"] if done.returncode in (0, 1) else []
            tenants_seen = sum(len(g["tenants"]) for j in data for g in j["gpus"])
            if tenants_seen >= 3 or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        seen["by_gpu_rc"] = done.returncode
        seen["by_gpu"] = json.loads(done.stdout) if done.stdout.strip() else done.stderr
        seen["by_gpu_text"] = _cli("memory", "--by-gpu").stdout

        done = _cli("doctor", "--json", "--deadline", "60")  # beside the live job
        seen["doctor_rc"] = done.returncode
        seen["doctor"] = json.loads(done.stdout)["data"] if done.stdout.strip() else done.stderr
        seen["trace"] = _trace_ray_tasks(out.parent / "trace.json")
        seen["traced_tasks"] = _traced_remote_tasks(out.parent / "tasks.json", [big, one])

        bad = _cli("plan", "2", "--prefer", "tpu_pod")
        seen["unknown_type"] = [bad.returncode, bad.stderr]
        del pending, strict
    finally:
        out.write_text(json.dumps(seen, indent=1, default=str))
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(os.environ["RAY_TMPDIR"], ignore_errors=True)


def _trace_ray_tasks(trace_file: Path) -> dict:
    """`rankscope trace` while a driver thread calls a traced actor: its calls as Ray tasks."""
    import threading

    import ray

    from rankscope.runtime.client import HubClient

    @ray.remote(num_cpus=0)
    class Traced:
        def __init__(self) -> None:
            import rankscope

            rankscope.init(rank=0, world_size=1, group="traced")

        def where(self) -> tuple[int, str]:
            return os.getpid(), ray.get_runtime_context().get_node_id()

        def work(self) -> None:
            time.sleep(0.05)

    traced = Traced.remote()
    pid, node_id = ray.get(traced.where.remote(), timeout=120)
    deadline = time.monotonic() + 30
    while not any(p.context.pid == pid for p in HubClient.attach().probes()):
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    stop = threading.Event()

    def call() -> None:
        while not stop.is_set():
            ray.get(traced.work.remote())

    caller = threading.Thread(target=call)
    caller.start()
    try:
        done = _cli("trace", "--group", "traced", "--duration", "3s", "-o", str(trace_file))
    finally:
        stop.set()
        caller.join()
    events = json.loads(trace_file.read_text())["traceEvents"] if trace_file.exists() else []
    tasks = [e for e in events if e.get("ph") == "X" and "task_id" in e.get("args", {})]
    return {"rc": done.returncode, "stderr": done.stderr[-2000:], "pid": pid,
            "node_id": node_id, "tasks": tasks}  # fmt: skip


def _traced_remote_tasks(trace_file: Path, nodes: list) -> dict:
    """`enable_detailed_tracing()` around `ray.get` of plain remote tasks on two nodes, whose
    workers have no probe: each task once, on its node and worker."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    import rankscope

    @ray.remote(num_cpus=0)
    def hop(i: int) -> tuple[str, int, str]:
        time.sleep(0.2)
        context = ray.get_runtime_context()
        return context.get_task_id(), os.getpid(), context.get_node_id()

    with rankscope.enable_detailed_tracing(path=str(trace_file)):
        ran = ray.get(
            [
                hop.options(
                    scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[i % 2].node_id, False)
                ).remote(i)
                for i in range(6)
            ],
            timeout=120,
        )
        time.sleep(1.5)  # Ray flushes task events every second
    events = json.loads(trace_file.read_text())["traceEvents"] if trace_file.exists() else []
    tasks = [e for e in events if e.get("ph") == "X" and "worker_pid" in e.get("args", {})]
    submits = [e for e in events if e.get("ph") == "X" and e["name"] == "submit hop"]
    arrows = [e for e in events if e.get("ph") == "s" and e.get("cat") == "ray"]
    return {"ran": ran, "tasks": tasks, "submits": submits, "arrows": arrows}


if __name__ == "__main__":
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="rs-resources-", dir="/tmp")
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ["RANKSCOPE_HEARTBEAT_INTERVAL"] = "0.25"
    os.environ["RANKSCOPE_RUN_DIR"] = os.path.join(os.environ["RAY_TMPDIR"], "runs")
    main(Path(sys.argv[1]))
