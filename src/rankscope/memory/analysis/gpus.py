"""`memory --by-gpu`: processes grouped by the physical GPU they use, and its co-tenants.

Pure: each process's `GpuTenancy` (its probe's answer) in, one `GpuShare` per physical GPU out.
A GPU is (node, device UUID) where NVML answered, else (node, physical index) from Ray's GPU ids
or, for a process Ray gave no GPU, its CUDA_VISIBLE_DEVICES. Flags: Ray shares of the co-tenants
adding to more than one GPU, processes on a GPU without a Ray share of it (Ray cannot count
them), and co-tenants whose memory together passes the threshold of the device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rankscope.memory.model import GpuTenancy

__all__ = ["GpuProcess", "GpuShare", "TenantRow", "group_by_gpu"]

EPS = 1e-6
DEFAULT_THRESHOLD = 0.90


@dataclass(frozen=True)
class GpuProcess:
    """One probed process and its answer (the CLI builds these from the probes)."""

    label: str
    node: str
    """Node id (what tells two nodes' GPU 0 apart)."""
    node_ip: str
    pid: int
    tenancy: GpuTenancy
    rank: int | None = None
    group: str | None = None
    actor_class: str | None = None


@dataclass(frozen=True)
class TenantRow:
    label: str
    pid: int
    actor_class: str | None
    ray_share: float
    """This process's Ray GPU amount on this device (0: it uses the GPU outside Ray)."""
    memory: int | None
    """Bytes it holds on the device: NVML's per-process count, else PyTorch's reserved bytes."""
    via: str
    """`ray` (Ray assigned the GPU) or `CUDA_VISIBLE_DEVICES`."""
    rank: int | None = None


@dataclass(frozen=True)
class GpuShare:
    node: str
    node_ip: str
    index: int | None
    uuid: str | None
    total: int | None
    used: int | None
    """The device's used bytes as the driver counts them (every process, probed or not)."""
    tenants: tuple[TenantRow, ...]
    findings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ray_shares(self) -> float:
        return sum(t.ray_share for t in self.tenants)

    @property
    def tenants_memory(self) -> int | None:
        known = [t.memory for t in self.tenants if t.memory is not None]
        return sum(known) if known else None

    @property
    def name(self) -> str:
        gpu = f"GPU {self.index}" if self.index is not None else "GPU ?"
        return f"{gpu} on {self.node_ip} ({self.node[:8]})" + (f" {self.uuid}" if self.uuid else "")


def group_by_gpu(
    processes: Sequence[GpuProcess], *, threshold: float = DEFAULT_THRESHOLD
) -> list[GpuShare]:
    """One share per physical GPU that some process uses; flagged GPUs first."""
    groups: dict[tuple[str, str], list[tuple[GpuProcess, TenantRow, int | None, str | None]]] = {}
    devices: dict[tuple[str, str], tuple[int | None, int | None]] = {}
    for p in processes:
        t = p.tenancy
        via = "ray" if t.ray_gpu_ids else "CUDA_VISIBLE_DEVICES"
        ids = list(t.ray_gpu_ids) or _visible(t.cuda_visible_devices)
        if not ids:
            continue
        share = t.ray_gpus / len(ids) if t.ray_gpu_ids else 0.0
        by_index = {str(d.index): d for d in t.devices}
        by_uuid = {d.uuid: d for d in t.devices}
        own = dict(t.process_used)
        for gid in ids:
            dev = by_index.get(gid) or by_uuid.get(gid)
            uuid = dev.uuid if dev is not None else (gid if gid.startswith("GPU-") else None)
            key = (p.node, uuid or f"index:{gid}")
            memory = own.get(uuid) if uuid is not None and uuid in own else None
            if memory is None and t.torch_reserved is not None and len(ids) == 1:
                memory = t.torch_reserved
            index = dev.index if dev is not None else (int(gid) if gid.isdigit() else None)
            row = TenantRow(p.label, p.pid, p.actor_class, share, memory, via, p.rank)
            groups.setdefault(key, []).append((p, row, index, uuid))
            total = (
                dev.total if dev is not None else (t.torch_device_total if len(ids) == 1 else None)
            )
            used = dev.used if dev is not None else None
            old = devices.get(key, (None, None))
            devices[key] = (old[0] or total, old[1] or used)
    shares = []
    for key, members in groups.items():
        first = members[0]
        tenants = tuple(
            sorted((m[1] for m in members), key=lambda r: (r.rank is None, r.rank, r.pid))
        )
        total, used = devices[key]
        found = GpuShare(first[0].node, first[0].node_ip, first[2], first[3], total, used, tenants)
        shares.append(_flag(found, threshold))
    shares.sort(key=lambda s: (not s.findings, s.node_ip, s.node, s.index or 0))
    return shares


def _flag(share: GpuShare, threshold: float) -> GpuShare:
    findings = []
    if share.ray_shares > 1.0 + EPS:
        findings.append(
            f"over-subscribed: the co-tenants' Ray GPU shares add to {share.ray_shares:.2f} of 1"
        )
    outside = [t for t in share.tenants if t.ray_share <= EPS]
    if outside and len(share.tenants) > 1:
        names = ", ".join(f"{t.label}" for t in outside)
        findings.append(
            f"{len(share.tenants)} processes share it but Ray counts only "
            f"{len(share.tenants) - len(outside)}: {names} use it without a Ray GPU share "
            "(CUDA_VISIBLE_DEVICES)"
        )
    mem = share.tenants_memory
    held = max(mem or 0, share.used or 0)
    if share.total and held > threshold * share.total:
        findings.append(
            f"memory: the co-tenants hold {held / share.total:.0%} of the device "
            f"(over {threshold:.0%}): {_top(share.tenants)}"
        )
    return GpuShare(
        share.node,
        share.node_ip,
        share.index,
        share.uuid,
        share.total,
        share.used,
        share.tenants,
        tuple(findings),
    )


def _top(tenants: Sequence[TenantRow]) -> str:
    known = sorted((t for t in tenants if t.memory is not None), key=lambda t: -(t.memory or 0))
    return ", ".join(f"{t.label} {(t.memory or 0) / 2**30:.1f} GiB" for t in known[:4]) or "-"


def _visible(value: str | None) -> list[str]:
    if not value:
        return []
    return [v.strip() for v in value.split(",") if v.strip() and v.strip() != "-1"]
