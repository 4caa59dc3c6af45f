"""What the preflight doctor reports: each node's facts, and one result per check."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Check", "ClusterFacts", "Gpu", "NodeFacts", "PreflightReport", "Status"]


class Status(str, enum.Enum):
    """A check's verdict."""

    OK = "ok"
    """Nothing to do."""
    WARN = "warn"
    """Works, but slow or risky: read the fix."""
    FAIL = "fail"
    """The job will fail or hang: fix it before launching (exit code 1)."""
    SKIP = "skip"
    """Could not be checked here (no GPU, no path given); says why."""


@dataclass(frozen=True)
class Gpu:
    index: str
    name: str
    driver: str
    total_mib: float | None
    free_mib: float | None
    ecc_uncorrected: float | None
    compute_cap: str


@dataclass(frozen=True)
class NodeFacts:
    """One node as its pinned task saw it (`probe.node_facts`), plus what Ray says of it."""

    label: str
    node_id: str
    hostname: str
    python: str
    versions: dict[str, str | None]
    torch_cuda: str | None
    gpus: tuple[Gpu, ...]
    gpu_error: str | None
    shm: dict[str, int] | None
    nofile: tuple[int, int] | None
    disks: dict[str, dict[str, Any]]
    memory: dict[str, int] | None
    variables: dict[str, str]
    interfaces: tuple[str, ...]
    shared: dict[str, Any] | None
    """The shared directory here: {directory, exists, content of the sentinel or None}."""
    fake: str | None
    clock_offset_s: float | None = None
    """This node's clock minus the CLI's, from the round trip of a clock task."""
    clock_error_s: float | None = None
    """Half that round trip: the offset is known within this much."""
    ray_gpus: float = 0.0
    object_store_bytes: float = 0.0
    xids: tuple[dict[str, Any], ...] = ()
    """The driver's Xid errors since boot: {pci, xid, text}, oldest first."""
    xid_error: str | None = None
    """Why the kernel log was not read (no driver, not permitted)."""

    @classmethod
    def from_probe(
        cls, label: str, node_id: str, raw: dict[str, Any], resources: dict[str, float]
    ) -> NodeFacts:
        gpus = tuple(Gpu(**g) for g in raw["gpus"]["devices"])
        nofile = raw.get("nofile")
        return cls(
            label=label,
            node_id=node_id,
            hostname=raw["hostname"],
            python=raw["python"],
            versions=dict(raw["versions"]),
            torch_cuda=raw.get("torch_cuda"),
            gpus=gpus,
            gpu_error=raw["gpus"]["error"],
            shm=raw.get("shm"),
            nofile=(nofile[0], nofile[1]) if nofile else None,
            disks=raw.get("disks") or {},
            memory=raw.get("memory"),
            variables=dict(raw.get("variables") or {}),
            interfaces=tuple(raw.get("interfaces") or ()),
            shared=raw.get("shared"),
            fake=raw.get("fake"),
            ray_gpus=resources.get("GPU", 0.0),
            object_store_bytes=resources.get("object_store_memory", 0.0),
            xids=tuple((raw.get("xids") or {}).get("events") or ()),
            xid_error=(raw.get("xids") or {}).get("error"),
        )


@dataclass(frozen=True)
class ClusterFacts:
    """What the CLI learns from Ray itself, not from a node."""

    address: str
    token_auth: bool | None
    dashboard_url: str | None
    dashboard_error: str | None
    shared_path: str | None = None
    sentinel_writer: str | None = None
    """The node that wrote the shared-file-system sentinel."""
    sentinel_write_error: str | None = None
    sentinel_token: str | None = None
    min_driver: str = "525.60.11"
    runtime_env: str | None = None
    """The `--runtime-env` file the facts were gathered in."""


@dataclass(frozen=True)
class Check:
    """One row group of the report: a check, its verdict, the evidence per node, the fix."""

    name: str
    status: Status
    summary: str
    evidence: dict[str, str] = field(default_factory=dict)
    fix: str = ""


@dataclass(frozen=True)
class PreflightReport:
    cluster: ClusterFacts
    nodes: tuple[NodeFacts, ...]
    checks: tuple[Check, ...]
    unanswered: tuple[str, ...] = ()
    """Nodes that did not answer by the deadline, or whose task failed (with why)."""

    @property
    def failed(self) -> bool:
        return any(c.status == Status.FAIL for c in self.checks)
