"""The fact source: what one node says about itself, run there by a pinned Ray task.

Standard library only (psutil when present), and a plain dict out, so that the function can be
shipped by value into a job's environment (`--runtime-env`) that has no rankscope installed.
Package versions come from `importlib.metadata` (never by importing torch, vLLM or CUDA: an
import can take seconds, and asking torch for CUDA starts a context of ~500 MB per GPU).

Test hook: RANKSCOPE_DOCTOR_FAKE_VERSION="torch=2.0.0,vllm=0.1.0", read here only when set,
replaces those reported versions (and is itself reported, so the report shows it was faked).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
from importlib import metadata
from typing import Any

FAKE_VERSION_VAR = "RANKSCOPE_DOCTOR_FAKE_VERSION"
NVIDIA_SMI_TIMEOUT_S = 5.0
PACKAGES = {
    "torch": ("torch",),
    "ray": ("ray",),
    "transformers": ("transformers",),
    "vllm": ("vllm",),
    "verl": ("verl",),
    "rankscope": ("rankscope",),
    "nccl": ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"),
    "cuda_runtime": (
        "nvidia-cuda-runtime-cu13",
        "nvidia-cuda-runtime-cu12",
        "nvidia-cuda-runtime-cu11",
        "nvidia-cuda-runtime",
    ),
}
"""What `versions` reports, by the distributions that carry it (the first installed wins)."""
VARIABLE_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "UCX_")
KERNEL_LOG_TIMEOUT_S = 3.0
MAX_XIDS = 50
XID_LINE = re.compile(r"NVRM: Xid \(([^)]*)\): (\d+),?\s*(.*)")
"""The driver's report of a GPU error in the kernel log: `NVRM: Xid (PCI:0000:3b:00): 79, ...`."""
SMI_FIELDS = (
    "index,name,driver_version,memory.total,memory.free,"
    "ecc.errors.uncorrected.volatile.total,compute_cap"
)


def node_facts(paths: dict[str, str], shared: str | None = None) -> dict[str, Any]:
    """Everything the doctor checks on this node.

    `paths`: {name: path} whose free disk to measure, and `shared` the directory that must be
    shared (`~` and `$VAR` resolved here, as this node's workers would).
    """
    started = time.time()
    facts: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "versions": _versions(),
        "torch_cuda": _torch_cuda(),
        "gpus": gpus(),
        "xids": xid_events(),
        "shm": _disk("/dev/shm"),
        "nofile": _nofile(),
        "disks": {
            name: {"path": _expand(p), "usage": _disk(_expand(p))} for name, p in paths.items()
        },
        "memory": _memory(),
        "variables": {
            k: v for k, v in sorted(os.environ.items()) if k.startswith(VARIABLE_PREFIXES)
        },
        "interfaces": _interfaces(),
        "shared": None if shared is None else _shared(shared),
        "fake": os.environ.get(FAKE_VERSION_VAR),
    }
    facts["time"] = (started + time.time()) / 2
    return facts


def ship_by_value() -> None:
    """Called on the CLI side: Ray pickles this module's functions by value from now on, so a
    job environment without rankscope runs them, and a worker does not import rankscope (its
    package imports every feature: ~0.5 s per node on a cold worker)."""
    import ray.cloudpickle

    with contextlib.suppress(ValueError):  # already registered
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def write_sentinel(directory: str, name: str, token: str) -> str | None:
    """Write the sentinel on this node; None when written, else why not (one line)."""
    path = os.path.join(_expand(directory), name)
    try:
        with open(path, "w") as f:
            f.write(token)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc} ({path})"
    return None


def remove_sentinel(directory: str, name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(_expand(directory), name))


def clock() -> float:
    """This node's wall clock, for skew from task round trips."""
    return time.time()


def _expand(path: str) -> str:
    return os.path.expanduser(os.path.expandvars(path))


def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for what, dists in PACKAGES.items():
        found[what] = None
        for dist in dists:
            try:
                found[what] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
            except Exception:
                break
    fake = os.environ.get(FAKE_VERSION_VAR)
    if fake:
        for item in fake.split(","):
            name, _, version = item.partition("=")
            if name.strip():
                found[name.strip()] = version.strip() or None
    return found


def _torch_cuda() -> str | None:
    """torch's CUDA, read from torch/version.py as text (`cuda = '12.8'`): no import."""
    try:
        dist = metadata.distribution("torch")
        text = pathlib.Path(str(dist.locate_file("torch/version.py"))).read_text()
    except Exception:
        return None
    match = re.search(r"^cuda\s*(?::\s*\S+)?\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
    return match.group(1) if match else None


def gpus() -> dict[str, Any]:
    """nvidia-smi's view, or why there is none; ECC from the same call."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {"error": "no nvidia-smi on this node (no GPU driver)", "devices": []}
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"nvidia-smi failed: {type(exc).__name__}", "devices": []}
    if out.returncode != 0:
        reason = (out.stderr.strip() or out.stdout.strip() or "no output").splitlines()[0]
        return {"error": f"nvidia-smi failed: {reason}", "devices": []}
    devices = []
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 7:
            continue
        devices.append(
            {
                "index": cells[0],
                "name": cells[1],
                "driver": cells[2],
                "total_mib": _number(cells[3]),
                "free_mib": _number(cells[4]),
                "ecc_uncorrected": _number(cells[5]),
                "compute_cap": cells[6],
            }
        )
    return {"error": None, "devices": devices}


def xid_events() -> dict[str, Any]:
    """The driver's Xid errors since boot (kernel log), or why they cannot be read; nothing to
    read on a node without the NVIDIA driver."""
    if not os.path.exists("/proc/driver/nvidia"):
        return {"error": "no NVIDIA driver", "events": []}
    for command in (["dmesg"], ["journalctl", "-k", "-b", "--no-pager", "-q", "-o", "cat"]):
        exe = shutil.which(command[0])
        if exe is None:
            continue
        try:
            out = subprocess.run(
                [exe, *command[1:]], capture_output=True, text=True, timeout=KERNEL_LOG_TIMEOUT_S
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0:
            return {"error": None, "events": parse_xids(out.stdout)}
    return {"error": "the kernel log is not readable here (dmesg needs root)", "events": []}


def parse_xids(text: str) -> list[dict[str, Any]]:
    """Every `NVRM: Xid` line as {pci, xid, text}; the newest MAX_XIDS."""
    found = []
    for line in text.splitlines():
        match = XID_LINE.search(line)
        if match:
            pci, xid, rest = match.groups()
            found.append({"pci": pci, "xid": int(xid), "text": rest.strip()[:200]})
    return found[-MAX_XIDS:]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]" (ECC off, or not reported)


def _disk(path: str) -> dict[str, int] | None:
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return None
    return {"total": usage.total, "free": usage.free}


def _nofile() -> list[int] | None:
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except Exception:
        return None
    return [soft, hard]


def _memory() -> dict[str, int] | None:
    try:
        with open("/proc/meminfo") as f:
            info = {k: int(v.split()[0]) * 1024 for k, _, v in (ln.partition(":") for ln in f)}
        return {"total": info["MemTotal"], "available": info["MemAvailable"]}
    except Exception:
        return None


def _interfaces() -> list[str]:
    try:
        return sorted(name for _, name in socket.if_nameindex())
    except OSError:
        return []


def _shared(directory: str) -> dict[str, Any]:
    path = _expand(directory)
    return {"directory": path, "exists": os.path.isdir(path), "content": None}


def read_sentinel(directory: str, name: str) -> dict[str, Any]:
    """The sentinel as this node sees it: {directory, exists, content (None: not there)}."""
    found = _shared(directory)
    try:
        with open(os.path.join(found["directory"], name)) as f:
            found["content"] = f.read(200)
    except OSError:
        pass
    return found
