"""Start-up is not a failure: work in a placement group that exists waits for its group, never
"can never be placed"; and work waiting on another job's resources names that job (pure)."""

from __future__ import annotations

import pytest

from rankscope.resources.analysis import explain_pending, group_of
from rankscope.resources.model import Demand, DemandKind, Holder, NodeResources, Verdict

NODE = "n" * 56
PG = "5f3a" * 9  # a placement group id: 36 hex characters
OTHER = "77aa" * 9


def _node(extra: dict[str, float] | None = None) -> NodeResources:
    total = {"CPU": 8.0, "memory": 1e9, **(extra or {})}
    return NodeResources(NODE, "10.0.0.1", total, dict(total))


def _train_worker(resources: dict[str, float], pg: str = PG) -> Demand:
    """Ray Train's worker actor as the GCS lists it: its bundle's resources, in its group."""
    return Demand(
        DemandKind.ACTOR, "w1", "RayTrainWorker", "PENDING_CREATION", (resources,),
        placement_group_id=pg, job_id="02000000",
    )  # fmt: skip


WILDCARD = {f"CPU_group_{PG}": 1.0, f"bundle_group_{PG}": 0.001}
INDEXED = {f"CPU_group_0_{PG}": 1.0, f"bundle_group_0_{PG}": 0.001}


def test_bundle_resource_names_give_their_group() -> None:
    assert group_of(f"CPU_group_{PG}") == PG
    assert group_of(f"GPU_group_3_{PG}") == PG
    assert group_of(f"bundle_group_0_{PG}") == PG
    assert group_of("CPU") == "" and group_of("node:10.0.0.1") == ""


@pytest.mark.parametrize("state", ["PENDING", "PREPARED", "RESCHEDULING"])
@pytest.mark.parametrize("resources", [WILDCARD, INDEXED])
def test_work_in_a_group_being_created_or_committed_waits_for_it(state, resources) -> None:
    # the group is not committed: no node has its bundle resources yet ("short by 0.001")
    (v,) = explain_pending([_train_worker(resources)], [_node()], [], {PG: state}).verdicts
    assert v.verdict is Verdict.PENDING_GROUP, v.reason
    doing = {"PENDING": "created", "PREPARED": "committed", "RESCHEDULING": "rescheduled"}
    assert f"waits for its placement group {PG[:12]}, which is being {doing[state]}" in v.reason
    assert "never" not in v.reason and "short" not in v.reason


def test_work_in_a_group_just_created_waits_until_its_bundles_show() -> None:
    # the group is CREATED (a holder of its bundles), the node's resources do not list them yet
    bundle = Holder("placement group", PG, "train bundle 0", NODE, {"CPU": 1.0}, "02000000")
    (v,) = explain_pending([_train_worker(WILDCARD)], [_node()], [bundle]).verdicts
    assert v.verdict is Verdict.PENDING_GROUP
    assert "its bundles are not in the nodes' resources yet" in v.reason
    # once they show, the usual packing: free, so schedulable
    shown = _node({f"CPU_group_{PG}": 1.0, f"bundle_group_{PG}": 1000.0})
    (v,) = explain_pending([_train_worker(WILDCARD)], [shown], [bundle]).verdicts
    assert v.verdict is Verdict.SCHEDULABLE


def test_bundle_resources_name_the_group_when_the_record_does_not() -> None:
    worker = _train_worker(INDEXED, pg="")  # a task in a group: only its resources say so
    (v,) = explain_pending([worker], [_node()], [], {PG: "PREPARED"}).verdicts
    assert v.verdict is Verdict.PENDING_GROUP and PG[:12] in v.reason


def test_a_group_that_does_not_exist_leaves_its_work_infeasible() -> None:
    # removed (or never made): nothing will ever add its bundle resources
    (v,) = explain_pending([_train_worker(WILDCARD)], [_node()], [], {OTHER: "CREATED"}).verdicts
    assert v.verdict is Verdict.INFEASIBLE and "short by 0.001" in v.reason
    plain = Demand(DemandKind.ACTOR, "a", "Big", "PENDING_CREATION", ({"CPU": 64.0},))
    (v,) = explain_pending([plain], [_node()], [], {PG: "PENDING"}).verdicts
    assert v.verdict is Verdict.INFEASIBLE  # not in any group: the totals say so


def test_the_pending_group_itself_is_judged_on_its_bundles() -> None:
    group = Demand(DemandKind.PLACEMENT_GROUP, PG, "train", "PENDING", ({"CPU": 1.0},) * 4, "PACK")
    report = explain_pending([group, _train_worker(WILDCARD)], [_node()], [])
    verdicts = {v.demand.kind: v for v in report.verdicts}
    assert verdicts[DemandKind.PLACEMENT_GROUP].verdict is Verdict.SCHEDULABLE
    assert verdicts[DemandKind.ACTOR].verdict is Verdict.PENDING_GROUP
    assert "see its line" in verdicts[DemandKind.ACTOR].reason
    assert not report.infeasible


def test_work_waiting_on_another_jobs_resources_names_that_job() -> None:
    node = NodeResources(NODE, "10.0.0.1", {"CPU": 4.0}, {"CPU": 0.0})
    holders = [
        Holder("actor", "h1", "Trainer", NODE, {"CPU": 3.0}, "01000000"),
        Holder("actor", "h2", "Mine", NODE, {"CPU": 1.0}, "02000000"),
    ]
    mine = Demand(DemandKind.ACTOR, "a", "Rollout", "PENDING_CREATION", ({"CPU": 2.0},),
                  job_id="02000000")  # fmt: skip
    (v,) = explain_pending([mine], [node], holders).verdicts
    assert v.verdict is Verdict.WAITING
    assert "held by actor Trainer of job 01000000 (CPU 3), actor Mine (CPU 1)" in v.reason
