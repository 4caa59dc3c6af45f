"""Memory verdicts from snapshots: leak trends, fragmentation, memory outside PyTorch, OOMs.

Pure functions over `MemorySnapshot` records (no Ray, no torch, no I/O), so every rule is tested
with synthetic or recorded numbers: `leaks` (the trend test), `verdicts` (one snapshot),
`oom` (out-of-memory forensics) and `cluster` (every rank's row of `rankscope memory`).
"""

from rankscope.memory.analysis.cluster import ClusterMemory, RankMemory, cluster_view
from rankscope.memory.analysis.leaks import (
    LeakReport,
    LeakThresholds,
    describe_leak,
    detect_leak,
    detect_leaks,
    kendall_tau,
    theil_sen,
    thin,
)
from rankscope.memory.analysis.oom import (
    CudaOomMessage,
    OomEvidence,
    OomReport,
    classify_oom,
    parse_cuda_oom,
    phase_of,
)
from rankscope.memory.analysis.verdicts import (
    ADVICE,
    Finding,
    MemoryThresholds,
    Verdict,
    cuda_findings,
    snapshot_findings,
)
from rankscope.memory.model import LeakFinding

__all__ = [
    "ADVICE",
    "ClusterMemory",
    "CudaOomMessage",
    "Finding",
    "LeakFinding",
    "LeakReport",
    "LeakThresholds",
    "MemoryThresholds",
    "OomEvidence",
    "OomReport",
    "RankMemory",
    "Verdict",
    "classify_oom",
    "cluster_view",
    "cuda_findings",
    "describe_leak",
    "detect_leak",
    "detect_leaks",
    "kendall_tau",
    "parse_cuda_oom",
    "phase_of",
    "snapshot_findings",
    "theil_sen",
    "thin",
]
