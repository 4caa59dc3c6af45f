"""verify_distributed_tensors / inspect_distributed_tensor across real Ray actors.

Four actors form a real gloo group (some on the second node); three more share no group and
meet at the rankscope hub. What the tests assert is what a user reads: the report's summary,
its per-tensor statuses, the outlier ranks and the differences.
"""

from __future__ import annotations

import json
import os
import time

import pytest
import ray
from workers_consistency import NAN_RANK, PERTURBED_RANK, SHAPE_RANK

WORLD = 4


@pytest.fixture(scope="module")
def ranks(cluster):
    from workers_consistency import ConsistencyRank

    actor_cls = ray.remote(num_cpus=0)(ConsistencyRank)
    actors = [actor_cls.remote(r, WORLD) for r in range(WORLD)]
    host, port = ray.get(actors[0].address.remote(), timeout=120)
    ray.get([a.join.remote(host, port) for a in actors], timeout=120)
    yield actors
    for a in actors:
        ray.kill(a)


def run_all(actors, method: str, *args, **kwargs):
    return ray.get([getattr(a, method).remote(*args, **kwargs) for a in actors], timeout=120)


def test_identical_replicas_are_consistent(ranks):
    reports = run_all(ranks, "verify", "identical", operation_name="gradient_sync")
    report = reports[0]
    assert report.ok
    assert [t.status.value for t in report.tensors] == ["consistent"] * 3
    assert report.summary == (
        "gradient_sync: all 3 tensors consistent (bitwise) across 4 ranks (0-3)"
    )
    assert report.skipped == ("step",)  # the int in the state dict is named, not compared
    assert report.exchanged_bytes == 0
    assert all(r == report for r in reports)


def test_one_element_changed_names_tensor_rank_and_difference(ranks):
    reports = run_all(ranks, "verify", "perturbed", operation_name="gradient_sync")
    report = reports[0]
    assert all(r == report for r in reports)  # every rank builds the same report
    assert not report.ok
    check = report.check("layers.0.weight")
    assert check.status.value == "mismatch"
    assert check.outlier_ranks == (PERTURBED_RANK,)
    assert check.reference_rank == 0
    assert check.max_abs == pytest.approx(1e-3, rel=1e-3)
    assert not check.estimated
    assert [t.name for t in report.differing] == ["layers.0.weight"]
    assert report.summary.startswith(
        f"gradient_sync: 1 of 3 tensors differ; rank {PERTURBED_RANK} is the outlier; "
        "worst layers.0.weight max|d|=1e-3 > tolerance 1e-6"
    )
    assert report.exchanged_bytes == 64 * 32 * 4  # only the differing tensor travelled
    text = str(report)
    assert "layers.0.weight  mismatch  0" in text


def test_change_below_tolerance_is_close(ranks):
    report = run_all(ranks, "verify", "close", operation_name="sync")[0]
    check = report.check("layers.0.weight")
    assert check.status.value == "close"
    assert check.outlier_ranks == (PERTURBED_RANK,)
    assert 0 < check.max_abs < 1e-6
    assert report.ok
    assert "1 of 3 tensors differ, all within tolerance 1e-6" in report.summary


def test_nan_on_one_rank_is_named(ranks):
    report = run_all(ranks, "verify", "nan")[0]
    assert report.nan_ranks == (NAN_RANK,)
    check = report.check("layers.0.weight")
    assert check.nan_ranks == (NAN_RANK,)
    assert check.outlier_ranks == (NAN_RANK,)
    assert check.status.value == "mismatch"
    assert f"NaN on rank {NAN_RANK} in 1 tensor (layers.0.weight)" in report.summary
    assert not report.ok


def test_shapes_that_differ_are_a_shape_mismatch(ranks):
    report = run_all(ranks, "verify", "shape")[0]
    check = report.check("layers.0.bias")
    assert check.status.value == "shape-mismatch"
    assert check.outlier_ranks == (SHAPE_RANK,)
    assert check.shape == (16,)
    assert f"layers.0.bias has shape (17,) on rank {SHAPE_RANK} but (16,) on rank 0" in (
        report.summary
    )
    assert report.check("layers.0.weight").status.value == "consistent"


def test_tensor_absent_on_one_rank_is_missing(ranks):
    report = run_all(ranks, "verify", "missing")[0]
    check = report.check("layers.0.bias")
    assert check.status.value == "missing"
    assert check.outlier_ranks == (SHAPE_RANK,)
    assert f"layers.0.bias is absent on rank {SHAPE_RANK}" in report.summary


def test_all_dtypes_equal_are_consistent(ranks):
    report = run_all(ranks, "verify", "dtypes")[0]
    statuses = {t.name: t.status.value for t in report.tensors}
    assert statuses == {
        n: "consistent"
        for n in ("bf16", "fp16", "int64", "bool", "noncontig", "empty", "scalar", "fp64")
    }
    assert report.ok


def test_all_dtypes_changed_are_caught_with_exact_differences(ranks):
    report = run_all(ranks, "verify", "dtypes-perturbed")[0]
    checks = {t.name: t for t in report.tensors}
    for name in ("bf16", "fp16", "int64", "bool", "noncontig", "scalar"):
        assert checks[name].status.value == "mismatch", name
        assert checks[name].outlier_ranks == (PERTURBED_RANK,), name
    assert checks["bf16"].max_abs == pytest.approx(0.5, abs=0.02)
    assert checks["fp16"].max_abs == pytest.approx(0.25, abs=0.01)
    assert checks["int64"].max_abs == 1.0
    assert checks["bool"].max_abs == 1.0
    assert checks["noncontig"].max_abs == pytest.approx(1e-3, rel=1e-3)
    assert checks["scalar"].max_abs == 1.0
    assert checks["fp64"].status.value == "close"
    assert checks["fp64"].max_abs == pytest.approx(1e-9, rel=1e-3)
    assert checks["empty"].status.value == "consistent"
    assert report.summary.startswith(
        f"7 of 8 tensors differ (1 within tolerance 1e-6); rank {PERTURBED_RANK} is the "
        "outlier in all 7"
    )


def test_past_the_byte_budget_differences_are_estimated(ranks):
    report = run_all(ranks, "verify", "perturbed", budget_bytes=0)[0]
    check = report.check("layers.0.weight")
    assert check.estimated
    assert check.status.value == "mismatch"
    (delta,) = check.deltas
    assert delta.lower <= 1e-3 <= delta.upper
    assert report.exchanged_bytes == 0
    assert "(estimated upper bound)" in report.summary
    assert "exchange budget are bounds estimated from sum, sum of squares, min and max" in str(
        report
    )


def test_reference_rank_given_by_the_caller(ranks):
    report = run_all(ranks, "verify", "perturbed", reference=PERTURBED_RANK)[0]
    check = report.check("layers.0.weight")
    assert check.reference_rank == PERTURBED_RANK
    assert check.outlier_ranks == tuple(r for r in range(WORLD) if r != PERTURBED_RANK)


def test_module_parameters_buffers_and_gradients(ranks):
    report = run_all(ranks, "verify_module", True, 1)[0]
    names = [t.name for t in report.tensors]
    assert "0.weight.grad" in names and "1.running_mean" in names
    assert [t.name for t in report.differing] == ["0.weight.grad"]
    assert report.check("0.weight.grad").outlier_ranks == (1,)
    without = run_all(ranks, "verify_module", False, 1)[0]
    assert without.ok and not any(n.endswith(".grad") for n in (t.name for t in without.tensors))


def test_raise_on_mismatch(ranks):
    messages = run_all(ranks, "verify_raising", "perturbed")
    assert messages[0].startswith("ConsistencyError: raising: 1 of 3 tensors differ")
    assert run_all(ranks, "verify_raising", "identical")[0] == "no exception"


def test_bad_input_on_one_rank_raises_on_every_rank_instead_of_hanging_the_others(ranks):
    messages = run_all(ranks, "verify_bad_input_on", 2)
    assert len(set(messages)) == 1
    assert messages[0].startswith("verify_distributed_tensors('bad_input'): bad input on rank 2: ")


def test_report_reaches_the_hub_as_an_event(ranks):
    run_all(ranks, "verify", "perturbed", operation_name="event_check")
    run_dir = os.environ["RANKSCOPE_RUN_DIR"]

    def events():
        found = []
        for root, _, files in os.walk(run_dir):
            if "events.jsonl" in files:
                with open(os.path.join(root, "events.jsonl"), encoding="utf-8") as f:
                    for line in f:
                        event = json.loads(line)
                        if event.get("kind") == "consistency":
                            found.append(event["payload"])
        return [e for e in found if e["operation_name"] == "event_check"]

    deadline = time.time() + 30
    while not events() and time.time() < deadline:
        time.sleep(0.25)
    (event,) = events()  # sent once, by the lowest rank, not once per rank
    assert event["ok"] is False
    assert event["summary"].startswith("event_check: 1 of 3 tensors differ")
    assert event["differing"][0]["name"] == "layers.0.weight"
    assert event["differing"][0]["outlier_ranks"] == [PERTURBED_RANK]


def test_inspect_distributed_tensor_replicated_and_sharded(ranks):
    replicated = run_all(ranks, "inspect", False)[0]
    assert replicated.layout.value == "replicated"
    assert [r.rank for r in replicated.rows] == [0, 1, 2, 3]
    assert str(replicated).splitlines()[0] == (
        "embed.weight: replicated: bitwise equal on all 4 ranks"
    )
    sharded = run_all(ranks, "inspect", True)[0]
    assert sharded.layout.value == "sharded"
    assert [r.shape for r in sharded.rows] == [(10,), (10,), (10,), (11,)]
    assert sharded.rows[1].mean == pytest.approx(14.5)
    assert sharded.rows[1].minimum == 10.0 and sharded.rows[1].maximum == 19.0
    lines = str(sharded).splitlines()
    assert lines[0] == "embed.weight: sharded: shapes differ, 41 elements in all"
    assert lines[1].split() == [
        "rank",
        "shape",
        "dtype",
        "device",
        "mean",
        "std",
        "min",
        "max",
        "norm",
        "nan",
        "inf",
    ]
    assert lines[3].split()[:4] == ["1", "10", "float32", "cpu"]


# ------------------------------------------------------------------------ hub transport
@pytest.fixture(scope="module")
def peers(cluster):
    from workers_consistency import HubPeer

    actor_cls = ray.remote(num_cpus=0)(HubPeer)
    actors = [actor_cls.remote(r) for r in range(3)]
    yield actors
    for a in actors:
        ray.kill(a)


def test_hub_transport_compares_actors_that_share_no_group(peers):
    reports = ray.get([p.verify.remote("perturbed", [0, 1, 2], 30.0) for p in peers], timeout=120)
    report = reports[0]
    assert all(r == report for r in reports)
    assert report.transport == "rankscope hub"
    check = report.check("layers.0.weight")
    assert check.outlier_ranks == (PERTURBED_RANK,)
    assert check.max_abs == pytest.approx(1e-3, rel=1e-3)  # exact, through the hub
    assert report.summary.startswith("weight_sync/perturbed: 1 of 3 tensors differ; rank 2")


def test_hub_transport_names_the_rank_that_never_came(peers):
    started = time.time()
    reports = ray.get(
        [p.verify.remote("identical", [0, 1, 2], 3.0) for p in peers[:2]], timeout=120
    )
    assert time.time() - started < 30
    report = reports[0]
    assert report.missing_ranks == (2,)
    assert report.ranks == (0, 1)
    assert not report.ok
    assert report.summary == (
        "weight_sync/identical: all 3 tensors consistent (bitwise) across 2 ranks (0,1); "
        "rank 2 did not take part (deadline passed)"
    )


def test_inspect_through_the_hub(peers):
    spreads = ray.get([p.inspect.remote([0, 1, 2]) for p in peers], timeout=120)
    assert spreads[0].layout.value == "divergent"
    assert [r.mean for r in spreads[0].rows] == [0.0, 1.0, 2.0]
