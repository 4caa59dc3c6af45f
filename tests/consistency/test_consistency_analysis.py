"""The comparison behind verify_distributed_tensors, on synthetic per-rank fingerprints."""

from __future__ import annotations

from rankscope.consistency.analysis import (
    compare,
    estimate_bounds,
    plan_differences,
)
from rankscope.consistency.model import (
    Difference,
    Fingerprint,
    RankDetails,
    RankFingerprints,
    Summary,
    TensorStatus,
)


def fps(rank: int, tensors: dict[str, tuple], skipped: tuple[str, ...] = ()) -> RankFingerprints:
    """tensors: name -> (shape, dtype, hash) or (shape, dtype, hash, nan, inf)."""
    return RankFingerprints(
        rank, tuple(Fingerprint(name, *spec) for name, spec in tensors.items()), skipped
    )


def world(n: int, tensors: dict[str, tuple], changes: dict[int, dict[str, tuple]]):
    return {r: fps(r, {**tensors, **changes.get(r, {})}) for r in range(n)}


MODEL = {f"layers.{i}.mlp.weight": ((8, 8), "float32", 100 + i) for i in range(412)}


def test_summary_names_outlier_and_worst_tensor():
    changed = {name: ((8, 8), "float32", 1) for name in list(MODEL)[3:6]}
    gathered = world(8, MODEL, {5: changed})
    diffs = {
        "layers.3.mlp.weight": Difference(2.1e-3, 0.5),
        "layers.4.mlp.weight": Difference(1e-4, 0.1),
        "layers.5.mlp.weight": Difference(3e-5, 0.1),
    }
    report = compare(
        gathered,
        {5: RankDetails(5, differences=diffs)},
        tolerance=1e-6,
        operation_name="gradient_sync",
    )
    assert report.summary == (
        "gradient_sync: 3 of 412 tensors differ; rank 5 is the outlier in all 3; "
        "worst layers.3.mlp.weight max|d|=2.1e-3 > tolerance 1e-6"
    )
    assert report.outlier_counts == {5: 3}
    assert not report.ok
    lines = str(report).splitlines()
    assert lines[1].split() == ["tensor", "status", "reference", "outliers", "max|d|", "max", "rel"]
    assert lines[2].split() == ["layers.3.mlp.weight", "mismatch", "0", "5", "2.1e-3", "0.5"]


def test_all_equal_is_ok():
    report = compare(world(4, MODEL, {}), operation_name="sync")
    assert report.ok
    assert report.summary == "sync: all 412 tensors consistent (bitwise) across 4 ranks (0-3)"
    assert str(report) == report.summary


def test_plan_exchanges_only_differing_tensors_within_the_budget():
    tensors = {
        "a": ((1000,), "float32", 1),
        "b": ((1000,), "bfloat16", 2),
        "c": ((10,), "float32", 3),
    }
    changes = {n: (s, d, 99) for n, (s, d, _) in tensors.items()}
    plans = plan_differences(world(3, tensors, {1: changes}), budget_bytes=4000 + 40)
    assert [(p.name, p.reference, p.outliers, p.nbytes, p.exact) for p in plans] == [
        ("a", 0, (1,), 4000, True),
        ("b", 0, (1,), 2000, False),  # past the budget: estimated
        ("c", 0, (1,), 40, True),
    ]


def test_close_within_tolerance_and_mismatch_beyond():
    gathered = world(3, {"w": ((4,), "float32", 1)}, {2: {"w": ((4,), "float32", 2)}})
    close = compare(gathered, {2: RankDetails(2, differences={"w": Difference(5e-7, 1e-7)})})
    assert close.check("w").status is TensorStatus.CLOSE
    assert close.ok
    far = compare(gathered, {2: RankDetails(2, differences={"w": Difference(5e-6, 1e-6)})})
    assert far.check("w").status is TensorStatus.MISMATCH


def test_reference_rank_given_makes_the_others_outliers():
    gathered = world(4, {"w": ((4,), "float32", 1)}, {2: {"w": ((4,), "float32", 2)}})
    report = compare(gathered, reference=2)
    assert report.check("w").reference_rank == 2
    assert report.check("w").outlier_ranks == (0, 1, 3)


def test_two_ranks_that_disagree_have_no_majority():
    gathered = world(2, {"w": ((4,), "float32", 1)}, {1: {"w": ((4,), "float32", 2)}})
    report = compare(gathered, {1: RankDetails(1, differences={"w": Difference(1.0, 1.0)})})
    check = report.check("w")
    assert not check.majority and check.reference_rank == 0
    assert "no majority: rank 1 differs from the lowest rank, taken as reference" in report.summary
    assert "0 (no majority)" in str(report)


def test_shape_and_dtype_mismatch():
    tensors = {"a": ((4,), "float32", 1), "b": ((4,), "float32", 2)}
    changes = {3: {"a": ((5,), "float32", 1), "b": ((4,), "bfloat16", 2)}}
    report = compare(world(4, tensors, changes))
    assert report.check("a").status is TensorStatus.SHAPE_MISMATCH
    assert report.check("b").status is TensorStatus.DTYPE_MISMATCH
    assert report.check("b").outlier_ranks == (3,)
    assert "b has dtype bfloat16 on rank 3 but float32 on rank 0" in report.summary
    assert "rank 3 is the outlier in both" in report.summary


def test_missing_tensor_and_missing_rank():
    gathered = world(3, {"a": ((4,), "float32", 1), "b": ((4,), "float32", 1)}, {})
    gathered[1] = fps(1, {"a": ((4,), "float32", 1)})
    report = compare(gathered, missing_ranks=(3,))
    assert report.check("b").status is TensorStatus.MISSING
    assert report.check("b").outlier_ranks == (1,)
    assert report.summary == (
        "1 of 2 tensors differ; rank 1 is the outlier; b is absent on rank 1; "
        "rank 3 did not take part (deadline passed)"
    )


def test_nan_and_inf_ranks_are_named_even_when_replicas_agree():
    tensors = {"w": ((4,), "float32", 1, 1, 0), "v": ((4,), "float32", 2, 0, 2)}
    report = compare(world(2, tensors, {}))
    assert report.nan_ranks == (0, 1) and report.inf_ranks == (0, 1)
    assert not report.ok
    assert report.summary == (
        "all 2 tensors consistent (bitwise) across 2 ranks (0,1); "
        "NaN on ranks 0,1 in 1 tensor (w); Inf on ranks 0,1 in 1 tensor (v)"
    )


def test_estimated_bounds_contain_the_true_difference():
    a = Summary(numel=4, sum=4.5, sumsq=5.25, minimum=1.0, maximum=1.5)  # [1, 1, 1, 1.5]
    b = Summary(numel=4, sum=4.0, sumsq=4.0, minimum=1.0, maximum=1.0)  # [1, 1, 1, 1]
    assert estimate_bounds(a, b) == (0.5, 0.5)
    c = Summary(numel=4, sum=3.5, sumsq=3.25, minimum=0.5, maximum=1.0)  # [1, 1, 1, 0.5]
    lower, upper = estimate_bounds(a, c)  # true max|d| is 1.0 (1.5 vs 0.5)
    assert lower <= 1.0 <= upper
    assert estimate_bounds(Summary(1, 0, 0, 0, 0, nan=1), b) == (float("inf"), float("inf"))


def test_estimated_differences_are_reported_as_such():
    gathered = world(3, {"w": ((4,), "float32", 1)}, {2: {"w": ((4,), "float32", 2)}})
    summaries = {
        0: Summary(4, 4.0, 4.0, 1.0, 1.0),
        2: Summary(4, 4.001, 4.002001, 1.0, 1.001),
    }
    details = {r: RankDetails(r, summaries={"w": s}) for r, s in summaries.items()}
    report = compare(gathered, details, budget_bytes=0)
    check = report.check("w")
    assert check.estimated and check.status is TensorStatus.MISMATCH
    assert "max|d|=1e-3 (estimated upper bound) > tolerance 1e-6" in report.summary
    assert "past the 0 MiB exchange budget are bounds estimated" in str(report)


def test_non_tensor_entries_are_noted():
    report = compare({0: fps(0, {"w": ((1,), "float32", 1)}, ("step",))})
    assert report.skipped == ("step",)
    assert "note: 1 non-tensor entries not compared: step" in str(report)


def test_the_copy_travels_on_the_gpu_only_when_every_rank_holds_it_there():
    """Under NCCL, ranks mixing CPU and GPU copies must still pick the same group."""
    from rankscope.consistency.analysis import plan_differences
    from rankscope.consistency.model import Fingerprint, RankFingerprints

    def ranks(devices: list[str]) -> dict[int, RankFingerprints]:
        return {
            r: RankFingerprints(r, (Fingerprint("w", (4,), "float32", r, device=d),))
            for r, d in enumerate(devices)
        }

    [mixed] = plan_differences(ranks(["cuda:0", "cpu", "cuda:0"]))
    [on_gpu] = plan_differences(ranks(["cuda:0", "cuda:1", "cuda:0"]))
    assert not mixed.on_device and on_gpu.on_device
