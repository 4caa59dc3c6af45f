"""`rankscope doctor` beside a live job: the by-GPU and pending views as checks (pure part;
the live cluster with declared GPUs and a dashboard is
tests/resources/test_resources_cluster.py's)."""

from __future__ import annotations

from rankscope.doctor.analysis import compare_environments
from rankscope.doctor.model import EnvironmentFacts, JobEnvironment, ProcessFacts
from rankscope.doctor.preflight.collect_live import (
    PENDING,
    VERSIONS,
    gpu_sharing_check,
    job_versions_check,
    pending_check,
)
from rankscope.doctor.preflight.model import Status
from rankscope.memory.analysis.gpus import GpuShare, TenantRow
from rankscope.memory.collect_by_gpu import JobGpus
from rankscope.resources.model import Demand, DemandKind, PendingReport, PendingVerdict, Verdict

GIB = 1 << 30


def _tenant(label: str, share: float, memory: int | None = None) -> TenantRow:
    return TenantRow(label, 100, "Tenant", share, memory, "ray")


def _gpu(*tenants: TenantRow, findings: tuple[str, ...] = ()) -> GpuShare:
    return GpuShare("a" * 40, "10.0.0.7", 0, None, 80 * GIB, None, tenants, findings)


def test_a_shared_gpu_within_its_shares_passes_and_names_every_co_tenant():
    job = JobGpus(
        "01000000", [_gpu(_tenant("rank 0", 0.5, 20 * GIB), _tenant("rank 1", 0.5))], [], []
    )
    check = gpu_sharing_check([job])
    assert check.status == Status.OK and check.summary == "1 GPU(s) in use, none over-subscribed"
    (row,) = check.evidence.values()
    assert row == "rank 0 (Tenant, 20.0 GiB, share 0.5), rank 1 (Tenant, share 0.5)"


def test_an_over_subscribed_gpu_fails_with_its_finding_and_the_fix():
    finding = "3 processes share it but their Ray shares sum to 1.5 (> 1)"
    gpu = _gpu(*(_tenant(f"rank {r}", 0.5) for r in range(3)), findings=(finding,))
    check = gpu_sharing_check([JobGpus("02000000", [gpu], [], [])])
    assert check.status == Status.FAIL
    assert check.summary == f"1 GPU(s) over-subscribed: job 02000000 {gpu.name}: {finding}"
    assert "num_gpus" in check.fix


def test_no_process_on_a_gpu_is_ok():
    check = gpu_sharing_check([JobGpus("01000000", [], ["rank 0"], [])])
    assert check.status == Status.OK and check.summary == "no live job's process uses a GPU"


def _verdict(name: str, verdict: Verdict, reason: str) -> PendingVerdict:
    demand = Demand(DemandKind.ACTOR, name + "-id", name, "PENDING_CREATION", ({"GPU": 3},))
    return PendingVerdict(demand, verdict, reason)


def test_work_that_fits_no_node_fails_and_work_that_waits_warns():
    infeasible = _verdict("NeedsThreeGpus", Verdict.INFEASIBLE, "no node has 3 GPU (most: 2)")
    waiting = _verdict("NeedsTwoGpus", Verdict.WAITING, "would fit, but GPU is held by GpuHolder")
    check = pending_check(PendingReport((), (infeasible, waiting)))
    assert check.name == PENDING and check.status == Status.FAIL
    assert check.summary == "2 pending: 1 fit no node, 1 wait"
    assert check.evidence["actor NeedsThreeGpus"] == "infeasible: no node has 3 GPU (most: 2)"
    assert pending_check(PendingReport((), (waiting,))).status == Status.WARN
    assert pending_check(PendingReport((), ())).summary == "nothing is pending"


def _process(rank: int, torch: str) -> ProcessFacts:
    facts = EnvironmentFacts(
        "3.11.7", "linux", "0.1.0", "2.60.0", torch, None, None, (), None, None
    )
    return ProcessFacts(f"rank {rank}", "h", facts, rank, "10.0.0.1:29500")


def test_a_live_job_whose_ranks_loaded_different_torch_fails_naming_the_odd_rank():
    processes = [_process(0, "2.13.0"), _process(1, "2.13.0"), _process(2, "2.6.0")]
    job = JobEnvironment("01000000", processes, compare_environments(processes), [])
    check = job_versions_check([job])
    assert check.name == VERSIONS and check.status == Status.FAIL
    assert check.summary.startswith("job 01000000: ") and "rank 2" in check.summary
    assert check.evidence["job 01000000"] == (
        "3 processes: python 3.11.7, torch 2.13.0/2.6.0, ray 2.60.0"
    )
    same = [_process(r, "2.13.0") for r in range(2)]
    ok = job_versions_check([JobEnvironment("01000000", same, compare_environments(same), [])])
    assert ok.status == Status.OK
