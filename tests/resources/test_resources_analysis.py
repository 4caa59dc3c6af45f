"""Pure tests: the allocator's packing, why-pending's verdicts, `memory --by-gpu`'s grouping."""

from __future__ import annotations

import pytest
from rich.console import Console
from typer.testing import CliRunner

from rankscope.memory.analysis.gpus import GpuProcess, group_by_gpu
from rankscope.memory.model import GpuDevice, GpuTenancy
from rankscope.resources import (
    AllocationError,
    NodeResources,
    PlanError,
    SmartResourceAllocator,
    Verdict,
)
from rankscope.resources.analysis import explain_pending, labels_match, pack_bundles
from rankscope.resources.model import Demand, DemandKind, Holder
from rankscope.resources.render import render_pending, render_plan

A = "a" * 56
B = "b" * 56
GIB = 1024**3


def _node(node_id, ip, gpus, *, free_gpus=None, cpus=8.0, labels=None, extra=None, free_gb=()):
    total = {"CPU": cpus, "GPU": float(gpus), **(extra or {})}
    free = dict(total)
    if free_gpus is not None:
        free["GPU"] = float(free_gpus)
    return NodeResources(node_id, ip, total, free, labels or {}, gpu_free_gb=tuple(free_gb))


def _two_nodes(**kw):
    """The issue's cluster: a 2-GPU gpu_highmem node and a 1-GPU node."""
    return [
        _node(B, "10.0.0.2", 1),
        _node(A, "10.0.0.1", 2, labels={"node_type": "gpu_highmem"}, **kw),
    ]


def _alloc(fallback, **kw):
    return SmartResourceAllocator(
        min_gpu_memory=kw.pop("min_gpu_memory", 4),
        preferred_node_type=kw.pop("preferred_node_type", "gpu_highmem"),
        fallback_strategy=fallback,
    )


def test_cpu_backup_places_three_on_gpus_and_one_on_cpu_saying_so():
    plan = _alloc("cpu_backup").plan(4, gpus_per_worker=1, cpus_per_worker=1, nodes=_two_nodes())
    assert [p.device for p in plan.placements] == ["GPU", "GPU", "GPU", "CPU"]
    assert len(plan.on_gpu) == 3 and len(plan.on_cpu_backup) == 1
    backup = plan.placements[3]
    assert backup.fallback and "GPU" not in backup.resources
    assert "cpu_backup" in backup.reason and "4 GB" in backup.reason
    assert sorted(g for p in plan.on_gpu for g in p.gpu_ids if p.node_id == A) == [0, 1]


def test_preferred_node_type_is_filled_first():
    plan = _alloc("cpu_backup").plan(4, nodes=_two_nodes())
    assert [p.node_id for p in plan.placements[:2]] == [A, A]
    assert "preferred type 'gpu_highmem'" in plan.placements[0].reason
    assert plan.placements[2].node_id == B and "not of type" in plan.placements[2].reason
    # a custom resource names a node type too
    nodes = [_node(B, "10.0.0.2", 1), _node(A, "10.0.0.1", 1, extra={"big_gpu": 1.0})]
    plan = SmartResourceAllocator(preferred_node_type="big_gpu").plan(1, nodes=nodes)
    assert plan.placements[0].node_id == A


def test_fail_names_the_shortfall_per_node():
    with pytest.raises(AllocationError) as err:
        _alloc("fail").plan(4, nodes=_two_nodes())
    text = str(err.value)
    assert "1 of 4 bundles do not fit" in text
    assert "GPU on 10.0.0.1" in text and "GPU on 10.0.0.2" in text and "short by 1" in text
    assert len(err.value.plan.unplaced) == 1


def test_wait_leaves_the_rest_unplaced_for_allocate_to_wait_on():
    plan = _alloc("wait").plan(4, nodes=_two_nodes())
    assert len(plan.unplaced) == 1 and plan.unplaced[0].fallback
    assert "does not fit" in plan.unplaced[0].reason


def test_gpus_with_too_little_free_memory_are_excluded():
    nodes = _two_nodes(free_gb=(80.0, 2.5))
    plan = _alloc("cpu_backup").plan(3, nodes=nodes)
    assert [(g.node_id, g.gpu_id) for g in plan.excluded_gpus] == [(A, 1)]
    assert "2.5 GB free < 4 GB" in plan.excluded_gpus[0].reason
    assert [p.device for p in plan.placements] == ["GPU", "GPU", "CPU"]
    assert "80.0 GB free" in plan.placements[0].reason


def test_fractions_share_a_gpu_until_it_is_full():
    nodes = [_node(A, "10.0.0.1", 1)]
    plan = SmartResourceAllocator(fallback_strategy="wait").plan(
        4, gpus_per_worker=0.33, cpus_per_worker=0, nodes=nodes
    )
    assert [p.gpu_ids for p in plan.placements[:3]] == [(0,), (0,), (0,)]
    assert not plan.placements[3].placed


def test_gpus_already_held_are_not_planned_again():
    nodes = [_node(A, "10.0.0.1", 2, free_gpus=1), _node(B, "10.0.0.2", 1, free_gpus=0)]
    plan = SmartResourceAllocator(fallback_strategy="wait").plan(2, nodes=nodes)
    assert [p.placed for p in plan.placements] == [True, False]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fallback_strategy": "retry"}, "unknown fallback_strategy 'retry': use one of"),
        ({"min_gpu_memory": -1}, "min_gpu_memory (-1 GB) must be 0 or more"),
    ],
)
def test_bad_options_are_one_clear_error(kwargs, message):
    with pytest.raises(PlanError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SmartResourceAllocator(**kwargs)


def test_an_unknown_node_type_names_the_types_the_cluster_has():
    with pytest.raises(PlanError) as err:
        SmartResourceAllocator(preferred_node_type="tpu_pod").plan(1, nodes=_two_nodes())
    assert str(err.value) == "unknown node type 'tpu_pod': the cluster's nodes offer gpu_highmem"


@pytest.mark.parametrize(
    "args",
    [["plan", "4", "--fallback", "retry"], ["plan", "4", "--min-gpu-memory", "-1"]],
)
def test_plan_cli_bad_input_is_one_line_exit_2(args):
    from rankscope.cli.main import app

    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("rankscope: error: ")


def test_ray_train_and_verl_arguments_come_from_the_plan():
    alloc = _alloc("fail")
    nodes = _two_nodes()
    config = alloc.ray_train_scaling_config(2, gpus_per_worker=1, cpus_per_worker=2, nodes=nodes)
    assert config == {
        "num_workers": 2,
        "use_gpu": True,
        "resources_per_worker": {"CPU": 2, "GPU": 1},
        "placement_strategy": "PACK",
        "label_selector": {"node_type": "gpu_highmem"},
    }
    assert alloc.verl_resource_pool(3, nodes=nodes) == {"global_pool": [2, 1]}
    with pytest.raises(AllocationError):
        alloc.verl_resource_pool(4, nodes=nodes)


def test_plan_renders_every_bundle():
    plan = _alloc("cpu_backup").plan(4, nodes=_two_nodes())
    text = _text(render_plan(plan))
    assert "3 on GPUs, 1 CPU fallbacks, 0 unplaced" in text and "cpu_backup" in text


# --- why-pending -------------------------------------------------------------------------


def _actor(name, resources, state="PENDING_CREATION", **kw):
    return Demand(DemandKind.ACTOR, f"{name}-id", name, state, (resources,), **kw)


def _gpu_nodes(free=(2, 2)):
    return [
        _node(A, "10.0.0.1", 2, free_gpus=free[0]),
        _node(B, "10.0.0.2", 2, free_gpus=free[1]),
    ]


def test_three_gpus_on_two_gpu_nodes_is_infeasible_with_the_shortfall():
    report = explain_pending([_actor("Big", {"GPU": 3.0})], _gpu_nodes(), [])
    (v,) = report.verdicts
    assert v.verdict == Verdict.INFEASIBLE and report.infeasible == (v,)
    assert {(s.node_id, s.resource, s.need, s.have) for s in v.shortfalls} == {
        (A, "GPU", 3.0, 2.0),
        (B, "GPU", 3.0, 2.0),
    }
    assert "GPU on 10.0.0.1 (aaaaaaaa): needs 3, has 2 (short by 1)" in v.reason


def test_a_fitting_actor_behind_a_holder_is_waiting_and_names_it():
    holders = [
        Holder("actor", "h1", "GpuHolder", A, {"GPU": 2.0, "CPU": 1.0}),
        Holder("actor", "h2", "CpuOnly", A, {"CPU": 1.0}),
        Holder("actor", "h3", "Elsewhere", B, {"GPU": 1.0}),
    ]
    report = explain_pending(
        [_actor("Wants2", {"GPU": 2.0}, label_selector={"ray.io/node-id": A})],
        [_node(A, "10.0.0.1", 2, free_gpus=0, labels={"ray.io/node-id": A}), _node(B, "x", 1)],
        holders,
    )
    (v,) = report.verdicts
    assert v.verdict == Verdict.WAITING
    assert [h.name for h in v.holders] == ["GpuHolder"]
    assert "GPU is held by actor GpuHolder (GPU 2)" in v.reason
    assert not report.infeasible


def test_strict_pack_that_no_single_node_fits_is_infeasible_but_pack_fits():
    bundles = ({"GPU": 1.0},) * 3
    strict = Demand(DemandKind.PLACEMENT_GROUP, "pg1", "", "PENDING", bundles, "STRICT_PACK")
    pack = Demand(DemandKind.PLACEMENT_GROUP, "pg2", "", "PENDING", bundles, "PACK")
    report = explain_pending([pack, strict], _gpu_nodes(), [])
    by_id = {v.demand.id: v for v in report.verdicts}
    assert by_id["pg1"].verdict == Verdict.INFEASIBLE
    assert "STRICT_PACK: all bundles on one node" in by_id["pg1"].reason
    assert "needs 3, has 2" in by_id["pg1"].reason
    assert by_id["pg2"].verdict == Verdict.SCHEDULABLE
    assert report.verdicts[0].demand.id == "pg1"  # infeasible first


def test_strict_spread_needs_a_node_per_bundle():
    demand = Demand(
        DemandKind.PLACEMENT_GROUP, "pg", "", "PENDING", ({"GPU": 1.0},) * 3, "STRICT_SPREAD"
    )
    (v,) = explain_pending([demand], _gpu_nodes(), []).verdicts
    assert v.verdict == Verdict.INFEASIBLE


def test_labels_arguments_object_store_and_groups():
    nodes = [_node(A, "10.0.0.1", 2, labels={"zone": "a"})]
    demands = [
        _actor("Zoned", {"CPU": 1.0}, label_selector={"zone": "b"}),
        Demand(DemandKind.TASK, "t1", "f", "PENDING_ARGS_AVAIL", ({"CPU": 1.0},)),
        Demand(DemandKind.TASK, "t2", "g", "PENDING_OBJ_STORE_MEM_AVAIL", ({"CPU": 1.0},)),
        Demand(DemandKind.PLACEMENT_GROUP, "pgX", "", "PENDING", ({"GPU": 5.0},), "PACK"),
        _actor("InGroup", {"GPU": 1.0}, placement_group_id="pgX"),
    ]
    verdicts = {
        v.demand.name or v.demand.id: v for v in explain_pending(demands, nodes, []).verdicts
    }
    assert verdicts["Zoned"].verdict == Verdict.INFEASIBLE
    assert "labels zone=b" in verdicts["Zoned"].reason
    assert verdicts["f"].verdict == Verdict.PENDING_ARGS
    assert verdicts["g"].verdict == Verdict.PENDING_OBJECT_STORE
    assert verdicts["pgX"].verdict == Verdict.INFEASIBLE
    assert verdicts["InGroup"].verdict == Verdict.PENDING_GROUP


def test_label_selector_syntax():
    labels = {"zone": "a", "gpu": "h100"}
    assert labels_match({"zone": "a"}, labels)
    assert not labels_match({"zone": "!a"}, labels)
    assert labels_match({"gpu": "in(a100,h100)"}, labels)
    assert labels_match({"gpu": "!in(a100,l4)"}, labels)
    assert not labels_match({"rack": "r1"}, labels)


def test_pack_bundles_strategies():
    caps = [{"GPU": 2.0}, {"GPU": 1.0}]
    assert pack_bundles([{"GPU": 1.0}] * 3, caps, "PACK") == [0, 0, 1]
    assert pack_bundles([{"GPU": 1.0}] * 3, caps, "STRICT_PACK") is None
    assert pack_bundles([{"GPU": 1.0}] * 2, caps, "STRICT_SPREAD") == [0, 1]
    assert pack_bundles([{"GPU": 1.0}] * 3, caps, "STRICT_SPREAD") is None


def test_render_pending_says_what_is_infeasible():
    report = explain_pending([_actor("Big", {"GPU": 3.0})], _gpu_nodes(), [])
    text = _text(render_pending(report))
    assert "infeasible" in text and "Big" in text and "can never be scheduled" in text


# --- memory --by-gpu ----------------------------------------------------------------------


def _proc(label, node, pid, ids=("0",), share=0.33, cvd=None, devices=(), used=(), reserved=None):
    tenancy = GpuTenancy(tuple(ids), share, cvd, tuple(devices), tuple(used), reserved)
    return GpuProcess(label, node, f"ip-{node[:1]}", pid, tenancy, actor_class="Tenant")


def test_co_tenants_of_one_gpu_are_grouped_with_their_shares():
    procs = [_proc(f"pid {i}", A, 100 + i) for i in range(3)]
    procs.append(_proc("other", B, 200, share=1.0))
    procs.append(_proc("cpu", A, 300, ids=(), share=0.0))
    shares = group_by_gpu(procs)
    assert len(shares) == 2
    ours = next(s for s in shares if s.node == A)
    assert [t.pid for t in ours.tenants] == [100, 101, 102]
    assert ours.ray_shares == pytest.approx(0.99) and ours.findings == ()


def test_a_process_outside_ray_on_a_shared_gpu_is_flagged():
    procs = [
        _proc("rank 0", A, 1, share=1.0),
        _proc("engine", A, 2, ids=(), share=0.0, cvd="0"),
    ]
    (share,) = group_by_gpu(procs)
    assert len(share.tenants) == 2
    assert any("without a Ray GPU share" in f and "engine" in f for f in share.findings)


def test_co_tenants_past_the_memory_threshold_are_named():
    dev = GpuDevice(0, "GPU-abc", 80 * GIB, 78 * GIB)
    procs = [
        _proc("actor", A, 1, share=0.5, devices=[dev], used=[("GPU-abc", 50 * GIB)]),
        _proc("rollout", A, 2, share=0.5, devices=[dev], used=[("GPU-abc", 28 * GIB)]),
    ]
    (share,) = group_by_gpu(procs)
    assert share.uuid == "GPU-abc" and share.total == 80 * GIB
    assert share.tenants_memory == 78 * GIB
    (finding,) = share.findings
    assert "98% of the device" in finding and "actor 50.0 GiB" in finding


def _text(renderable) -> str:
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def test_an_oom_verdict_names_the_co_tenants_that_held_the_gpu():
    from rankscope.memory.analysis.oom import OomReport
    from rankscope.memory.worker_gpus import describe_co_tenants

    dev = GpuDevice(3, "GPU-abc", 80 * GIB, 78 * GIB)
    apps = [["11", "GPU-abc", "51200"], ["12", "GPU-abc", "20480"], ["13", "GPU-other", "9"]]
    line = describe_co_tenants(dev, apps, own_pid=12)
    assert line == "GPU 3 (GPU-abc): 78.0 of 80.0 GiB used; other processes on it: pid 11 50.0 GiB"
    report = OomReport("OutOfMemoryError", "", None, (), None, None, extra={"co_tenants": line})
    assert f"  co-tenants: {line}" in report.summary().splitlines()
