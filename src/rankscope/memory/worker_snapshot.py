"""Taking one process's memory snapshot: host (procfs, else psutil) and CUDA (torch).

The host path reads /proc/self/statm and the head of /proc/meminfo through file descriptors kept
open (a few microseconds); USS needs a walk of every mapping (about a millisecond), so it is read
at most once a second unless asked for. The CUDA path turns `torch.cuda.memory_stats(device)`
and `torch.cuda.mem_get_info(device)` into a `CudaMemory` with a pure function of that dict, so
it is tested against recorded dicts where no GPU exists.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from rankscope.memory.model import CudaMemory, MemorySnapshot

USS_INTERVAL_S = 1.0
"""USS is re-read at most this often (it costs ~1 ms in a process with torch loaded)."""
NODE_INTERVAL_S = 0.1
"""The node's total and available RAM are re-read at most this often (the kernel formats all
of /proc/meminfo on each read); snapshots in between carry the latest reading."""

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class _ProcReader:
    """/proc readers with descriptors kept open; reopened after a fork, psutil elsewhere."""

    def __init__(self) -> None:
        self._pid = -1
        self._statm = -1
        self._meminfo = -1
        self._lock = threading.Lock()
        self._last_uss: tuple[float, int | None] = (0.0, None)
        self._last_node: tuple[float, tuple[int, int]] = (-1e9, (0, 0))

    def _fds(self) -> tuple[int, int]:
        pid = os.getpid()
        if pid != self._pid:
            with self._lock:
                if pid != self._pid:
                    try:
                        self._statm = os.open(f"/proc/{pid}/statm", os.O_RDONLY)
                        self._meminfo = os.open("/proc/meminfo", os.O_RDONLY)
                    except OSError:
                        self._statm = self._meminfo = -1
                    self._pid = pid
        return self._statm, self._meminfo

    def process(self) -> tuple[int, int]:
        """(rss, anonymous rss) in bytes."""
        statm, _ = self._fds()
        if statm >= 0:
            fields = os.pread(statm, 256, 0).split()
            rss = int(fields[1]) * _PAGE
            return rss, rss - int(fields[2]) * _PAGE
        import psutil

        info = psutil.Process().memory_info()
        return int(info.rss), int(info.rss - getattr(info, "shared", 0))

    def node(self, *, force: bool = False) -> tuple[int, int]:
        """(total, available) bytes of the node's RAM, at most NODE_INTERVAL_S old."""
        now = time.monotonic()
        last, value = self._last_node
        if force or now - last >= NODE_INTERVAL_S:
            value = self._read_node()
            self._last_node = (now, value)
        return value

    def _read_node(self) -> tuple[int, int]:
        _, meminfo = self._fds()
        if meminfo >= 0:
            total = available = -1
            for line in os.pread(meminfo, 512, 0).splitlines():
                if line.startswith(b"MemTotal:"):
                    total = int(line.split()[1]) * 1024
                elif line.startswith(b"MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
            if total >= 0 and available >= 0:
                return total, available
        import psutil

        vm = psutil.virtual_memory()
        return int(vm.total), int(vm.available)

    def uss(self, *, force: bool = False) -> int | None:
        """Private (unique) bytes of this process; None between throttled reads."""
        now = time.monotonic()
        last, value = self._last_uss
        if not force and now - last < USS_INTERVAL_S:
            return None
        value = _read_uss()
        self._last_uss = (now, value)
        return value


def _read_uss() -> int | None:
    try:
        with open("/proc/self/smaps_rollup", "rb") as f:
            total = 0
            for line in f:
                if line.startswith((b"Private_Clean:", b"Private_Dirty:")):
                    total += int(line.split()[1]) * 1024
            return total
    except OSError:
        pass
    try:
        import psutil

        return int(psutil.Process().memory_full_info().uss)
    except Exception:
        return None


_reader = _ProcReader()


def host_memory(*, uss: bool | None = None) -> tuple[int, int, int | None, int, int]:
    """(rss, anon, uss, node_total, node_available); `uss=True` forces a USS read."""
    rss, anon = _reader.process()
    total, available = _reader.node(force=bool(uss))
    u = None if uss is False else _reader.uss(force=bool(uss))
    return rss, anon, u, total, available


# ---------------------------------------------------------------------- CUDA
def cuda_memory_from_stats(
    stats: Mapping[str, Any], *, device: int, free: int, total: int
) -> CudaMemory:
    """A `CudaMemory` from `torch.cuda.memory_stats(device)` and `mem_get_info(device)`.

    Example: `cuda_memory_from_stats(torch.cuda.memory_stats(0), device=0, free=f, total=t)`.
    Keys missing from `stats` (an allocator that was never used has an empty dict) read as 0.
    """

    def get(key: str) -> int:
        return int(stats.get(key, 0) or 0)

    return CudaMemory(
        device=device,
        allocated=get("allocated_bytes.all.current"),
        reserved=get("reserved_bytes.all.current"),
        active=get("active_bytes.all.current"),
        inactive_split=get("inactive_split_bytes.all.current"),
        peak_allocated=get("allocated_bytes.all.peak"),
        peak_reserved=get("reserved_bytes.all.peak"),
        num_alloc_retries=get("num_alloc_retries"),
        num_ooms=get("num_ooms"),
        device_used=max(0, total - free),
        device_total=total,
    )


def torch_if_loaded() -> Any:
    """The torch module when this process already imported it (we never import it ourselves
    from the probe thread: importing torch takes seconds and memory)."""
    return sys.modules.get("torch")


def cuda_device_index(device: Any) -> int | None:
    """The CUDA device to watch: `device` if given and CUDA, else the current one, else None."""
    torch = torch_if_loaded()
    if torch is None:
        return None
    try:
        if not torch.cuda.is_available():
            return None
        if device is None:
            return int(torch.cuda.current_device())
        dev = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
        if dev.type != "cuda":
            return None
        return int(dev.index if dev.index is not None else torch.cuda.current_device())
    except Exception:
        return None


def read_cuda(device: int) -> CudaMemory | None:
    torch = torch_if_loaded()
    if torch is None:
        return None
    try:
        stats = torch.cuda.memory_stats(device)
        free, total = torch.cuda.mem_get_info(device)
    except Exception:
        return None
    return cuda_memory_from_stats(stats, device=device, free=int(free), total=int(total))


# --------------------------------------------------------------- model bytes
def tensor_bytes(tensors: Iterable[Any]) -> int:
    """Bytes of distinct tensors (shared storage counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for t in tensors:
        try:
            key = (t.untyped_storage().data_ptr(), t.device.index or 0)
            if key in seen and key[0] != 0:
                continue
            seen.add(key)
            total += t.numel() * t.element_size()
        except Exception:
            continue
    return total


def model_bytes(model: Any) -> tuple[int, int]:
    """(parameter bytes, gradient bytes) of a torch module."""
    params = list(model.parameters())
    grads = [p.grad for p in params if p.grad is not None]
    return tensor_bytes(params), tensor_bytes(grads)


def optimizer_bytes(optimizer: Any) -> int:
    """Bytes of every tensor in a torch optimizer's state (Adam's moments, ...)."""
    torch = torch_if_loaded()
    if torch is None:
        return 0
    tensors = [
        v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)
    ]
    return tensor_bytes(tensors)


def take_snapshot(
    *,
    step: int | None = None,
    tag: str | None = None,
    cuda_device: int | None = None,
    model: Any = None,
    optimizer: Any = None,
    uss: bool | None = None,
    tracemalloc_current: int | None = None,
) -> MemorySnapshot:
    """This process's memory now; `MemoryProfiler.take_snapshot` is the public way in."""
    rss, anon, u, node_total, node_available = host_memory(uss=uss)
    cuda = read_cuda(cuda_device) if cuda_device is not None else None
    params = grads = opt = None
    if model is not None:
        params, grads = model_bytes(model)
    if optimizer is not None:
        opt = optimizer_bytes(optimizer)
    return MemorySnapshot(
        time=time.time(),
        pid=os.getpid(),
        rss=rss,
        anon=anon,
        node_total=node_total,
        node_available=node_available,
        step=step,
        tag=tag,
        uss=u,
        cuda=cuda,
        params=params,
        grads=grads,
        optimizer_state=opt,
        tracemalloc_current=tracemalloc_current,
    )
