"""Comparing environments across ranks: what differs, who is the odd one out, what is too small."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from rankscope.doctor.model import EnvironmentFinding, ProcessFacts

MIN_SHM_BYTES = 1 << 30
"""Below this /dev/shm (Docker's default is 64 MiB), NCCL and DataLoader workers fail."""
COMPARED = ("python", "rankscope", "ray", "torch", "cuda", "nccl")


def compare_environments(processes: Sequence[ProcessFacts]) -> list[EnvironmentFinding]:
    """Versions and NCCL/torch variables that differ across ranks; /dev/shm that is too small."""
    findings: list[EnvironmentFinding] = []
    for name in COMPARED:
        values = {p.label: str(getattr(p.facts, name)) for p in processes}
        findings.extend(_differs(name, values))
    variables = sorted({k for p in processes for k in p.facts.variables})
    for name in variables:
        values = {p.label: p.facts.variables.get(name, "(unset)") for p in processes}
        findings.extend(_differs(name, values))
    small = sorted(
        {
            p.hostname
            for p in processes
            if p.facts.shm_total_bytes is not None and p.facts.shm_total_bytes < MIN_SHM_BYTES
        }
    )
    if small:
        sizes = {p.hostname: p.facts.shm_total_bytes or 0 for p in processes}
        findings.append(
            EnvironmentFinding(
                "/dev/shm",
                f"/dev/shm is {sizes[small[0]] / 2**20:.0f} MiB on {', '.join(small)}: NCCL and "
                "DataLoader workers need more; in Docker pass --shm-size=16g (or --ipc=host)",
                tuple(small),
            )
        )
    return findings


def _differs(name: str, values: dict[str, str]) -> list[EnvironmentFinding]:
    counts = Counter(values.values())
    if len(counts) < 2:
        return []
    majority, _ = counts.most_common(1)[0]
    odd = tuple(label for label, v in values.items() if v != majority)
    shown = ", ".join(f"{v} on {sum(1 for x in values.values() if x == v)}" for v in counts)
    return [
        EnvironmentFinding(
            name,
            f"{name} differs across ranks ({shown}); {', '.join(odd)} "
            f"{'has' if len(odd) == 1 else 'have'} {values[odd[0]]} where most have {majority}",
            odd,
        )
    ]
