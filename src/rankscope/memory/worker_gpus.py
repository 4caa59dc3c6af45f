"""The probe's `gpus` command: which physical GPUs this process uses, and how much of them.

Ray's GPU ids and assigned share come from the runtime context (they exist without real
devices, so a CPU cluster with declared GPUs answers too); CUDA_VISIBLE_DEVICES names the
devices of a process that bypasses Ray; device UUIDs, totals and per-process memory come from
`nvidia-smi` (NVML) only where it is installed, and PyTorch's reserved bytes only in a process
that already initialised CUDA (never imported, never initialised here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from typing import Any

from rankscope.memory import worker_snapshot as snap
from rankscope.memory.model import GpuDevice, GpuTenancy
from rankscope.runtime.probe import register_handler

__all__ = [
    "co_tenants",
    "current_tenancy",
    "describe_co_tenants",
    "query_nvidia_smi",
    "query_process_memory",
]

SMI_TIMEOUT_S = 3.0
CACHE_S = 1.0
_MIB = 1024**2
_cache: dict[str, tuple[float, Any]] = {}
_cache_lock = threading.Lock()


def query_nvidia_smi() -> list[GpuDevice]:
    """Every GPU of this node by physical index (empty without nvidia-smi or on its error)."""
    rows = _smi("--query-gpu=index,uuid,memory.total,memory.used")
    devices = []
    for row in rows:
        try:
            devices.append(
                GpuDevice(int(row[0]), row[1], int(float(row[2]) * _MIB), int(float(row[3]) * _MIB))
            )
        except (ValueError, IndexError):
            continue
    return devices


def query_process_memory(pid: int) -> tuple[tuple[str, int], ...]:
    """(device uuid, bytes) that `pid` holds on each GPU, as NVML counts it."""
    found = []
    for row in _smi("--query-compute-apps=pid,gpu_uuid,used_memory"):
        try:
            if int(row[0]) == pid:
                found.append((row[1], int(float(row[2]) * _MIB)))
        except (ValueError, IndexError):
            continue
    return tuple(found)


def current_tenancy() -> GpuTenancy:
    """This process's GPUs: Ray's ids and share, CUDA_VISIBLE_DEVICES, NVML and torch memory."""
    ids: tuple[str, ...] = ()
    share = 0.0
    error = ""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        try:
            ctx = ray.get_runtime_context()
            ids = tuple(str(i) for i in ctx.get_accelerator_ids().get("GPU", []))
            share = float(ctx.get_assigned_resources().get("GPU", 0.0))
        except Exception as exc:  # a driver or a worker between tasks: no assignment to read
            error = f"Ray's GPU assignment: {type(exc).__name__}: {exc}"
    reserved, total = _torch_memory()
    devices = tuple(query_nvidia_smi())
    return GpuTenancy(
        ray_gpu_ids=ids,
        ray_gpus=share,
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        devices=devices,
        process_used=query_process_memory(os.getpid()) if devices else (),
        torch_reserved=reserved,
        torch_device_total=total,
        error=error,
    )


def co_tenants(cuda_device: int | None) -> str:
    """The other processes on this process's GPU and what they hold, one line (NVML); "" when
    nvidia-smi is absent. `oom_guard` adds it to its verdict: who held the memory."""
    devices = query_nvidia_smi()
    if not devices:
        return ""
    visible = [v.strip() for v in (os.environ.get("CUDA_VISIBLE_DEVICES") or "").split(",")]
    visible = [v for v in visible if v]
    local = cuda_device or 0
    name = visible[local] if local < len(visible) else str(local)
    device = next((d for d in devices if name in (str(d.index), d.uuid)), None)
    if device is None:
        return ""
    return describe_co_tenants(
        device, _smi("--query-compute-apps=pid,gpu_uuid,used_memory"), os.getpid()
    )


def describe_co_tenants(device: GpuDevice, apps: list[list[str]], own_pid: int) -> str:
    """`GPU 3 (GPU-ab..): 78.0 of 80.0 GiB used; others: pid 12 30.0 GiB, ...` from NVML rows."""
    others = []
    for row in apps:
        try:
            pid, uuid, used = int(row[0]), row[1], float(row[2]) * _MIB
        except (ValueError, IndexError):
            continue
        if uuid == device.uuid and pid != own_pid:
            others.append((used, pid))
    others.sort(reverse=True)
    gib = 1024**3
    head = (
        f"GPU {device.index} ({device.uuid}): {device.used / gib:.1f} of "
        f"{device.total / gib:.1f} GiB used"
    )
    if not others:
        return head + "; no other process on it"
    listed = ", ".join(f"pid {pid} {used / gib:.1f} GiB" for used, pid in others[:8])
    return f"{head}; other processes on it: {listed}"


@register_handler("gpus", off_thread=True)
def _gpus_command(args: dict[str, Any]) -> GpuTenancy:
    return current_tenancy()


def _torch_memory() -> tuple[int | None, int | None]:
    torch = snap.torch_if_loaded()
    if torch is None:
        return None, None
    try:
        if not torch.cuda.is_initialized():
            return None, None
        _, total = torch.cuda.mem_get_info()
        return int(torch.cuda.memory_reserved()), int(total)
    except Exception:
        return None, None


def _smi(query: str) -> list[list[str]]:
    """nvidia-smi's CSV rows for `query`, cached a second (several probes of a node ask)."""
    with _cache_lock:
        hit = _cache.get(query)
        if hit is not None and time.monotonic() - hit[0] < CACHE_S:
            return list(hit[1])
    exe = shutil.which("nvidia-smi")
    rows: list[list[str]] = []
    if exe is not None:
        try:
            done = subprocess.run(
                [exe, query, "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=SMI_TIMEOUT_S,
                check=False,
            )
            if done.returncode == 0:
                rows = [
                    [c.strip() for c in line.split(",")]
                    for line in done.stdout.splitlines()
                    if line.strip()
                ]
        except (OSError, subprocess.SubprocessError):
            rows = []
    with _cache_lock:
        _cache[query] = (time.monotonic(), rows)
    return rows
