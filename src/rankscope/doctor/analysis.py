"""Comparing environments across ranks: what differs, who is the odd one out, what is too small.

Only like is compared with like: the ranks of one group against each other (processes without a
rank, such as Ray Train's controller or verl's driver-side actors, take part in no comparison),
and only what must agree across a group: the versions of what every compared process loaded
(torch only between ranks that imported it) and the variables NCCL, gloo and torch.distributed
read. Per-process values (CUDA_VISIBLE_DEVICES, MASTER_PORT, WORLD_SIZE, ...) are never compared.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from rankscope.doctor.model import EnvironmentFacts, EnvironmentFinding, ProcessFacts

__all__ = [
    "COMPARED_VARIABLE_PREFIXES",
    "MIN_SHM_BYTES",
    "compare_environments",
    "ordered",
    "rank_groups",
]

MIN_SHM_BYTES = 1 << 30
"""Below this /dev/shm (Docker's default is 64 MiB), NCCL and DataLoader workers fail."""
COMPARED_VARIABLE_PREFIXES = ("NCCL_", "TORCH_", "GLOO_")
"""Variables every rank of a group must agree on; the others are shown, never compared."""

_Version = Callable[[EnvironmentFacts], str | None]
VERSIONS: tuple[tuple[str, _Version], ...] = (
    ("python", lambda f: f.python),
    ("rankscope", lambda f: f.rankscope),
    ("ray", lambda f: f.ray),
    ("torch", lambda f: f.torch),
    # a torch without CUDA reports no CUDA version: a real difference between ranks with torch
    ("cuda", lambda f: None if f.torch is None else str(f.cuda)),
    ("nccl", lambda f: f.nccl),
)
"""What each process reports, or None when it did not load it (compared only where loaded)."""


def compare_environments(processes: Sequence[ProcessFacts]) -> list[EnvironmentFinding]:
    """Versions and NCCL/torch variables that differ across the ranks of a group; /dev/shm
    that is too small on any host."""
    findings: list[EnvironmentFinding] = []
    groups = rank_groups(processes)
    for group, ranks in groups.items():
        where = f" of group {group}" if len(groups) > 1 and group is not None else ""
        findings.extend(_compare_ranks(ranks, group, where))
    findings.extend(_small_shm(processes))
    return findings


def rank_groups(processes: Sequence[ProcessFacts]) -> dict[str | None, list[ProcessFacts]]:
    """The processes with a rank, by the group they are ranks of, each group by rank."""
    groups: dict[str | None, list[ProcessFacts]] = {}
    for p in ordered(processes):
        if p.rank is not None:
            groups.setdefault(p.group, []).append(p)
    return groups


def ordered(processes: Sequence[ProcessFacts]) -> list[ProcessFacts]:
    """Ranks first (by group, then rank), then the processes without a rank."""
    return sorted(
        processes,
        key=lambda p: (p.rank is None, p.group or "", p.rank or 0, p.hostname, p.label),
    )


def _compare_ranks(
    ranks: Sequence[ProcessFacts], group: str | None, where: str
) -> list[EnvironmentFinding]:
    findings: list[EnvironmentFinding] = []
    for name, version in VERSIONS:
        values = {p.label: v for p in ranks if (v := version(p.facts)) is not None}
        findings.extend(_differs(name, values, group, where))
    variables = sorted(
        {k for p in ranks for k in p.facts.variables if k.startswith(COMPARED_VARIABLE_PREFIXES)}
    )
    for name in variables:
        values = {p.label: p.facts.variables.get(name, "(unset)") for p in ranks}
        findings.extend(_differs(name, values, group, where))
    return findings


def _small_shm(processes: Sequence[ProcessFacts]) -> list[EnvironmentFinding]:
    small = sorted(
        {
            p.hostname
            for p in processes
            if p.facts.shm_total_bytes is not None and p.facts.shm_total_bytes < MIN_SHM_BYTES
        }
    )
    if not small:
        return []
    sizes = {p.hostname: p.facts.shm_total_bytes or 0 for p in processes}
    return [
        EnvironmentFinding(
            "/dev/shm",
            f"/dev/shm is {sizes[small[0]] / 2**20:.0f} MiB on {', '.join(small)}: NCCL and "
            "DataLoader workers need more; in Docker pass --shm-size=16g (or --ipc=host)",
            tuple(small),
        )
    ]


def _differs(
    name: str, values: dict[str, str], group: str | None, where: str
) -> list[EnvironmentFinding]:
    counts = Counter(values.values())
    if len(counts) < 2:
        return []
    majority, _ = counts.most_common(1)[0]
    odd = tuple(label for label, v in values.items() if v != majority)
    shown = ", ".join(f"{v} on {n}" for v, n in counts.items())
    return [
        EnvironmentFinding(
            name,
            f"{name} differs across ranks{where} ({shown}); {', '.join(odd)} "
            f"{'has' if len(odd) == 1 else 'have'} {values[odd[0]]} where most have {majority}",
            odd,
            group,
        )
    ]
