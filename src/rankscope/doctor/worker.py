"""What a process runs on: versions, devices, shared memory, the variables NCCL and torch read.

Collected by each probe (command `environment`) so that `rankscope diagnose` can compare them
across every rank of the job and name the ones that differ.
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
import sys
from typing import Any

from rankscope._version import __version__
from rankscope.doctor.model import EnvironmentFacts
from rankscope.runtime.probe import register_handler

NVIDIA_SMI_TIMEOUT_S = 3.0
WATCHED_VARIABLE_PREFIXES = ("NCCL_", "TORCH_NCCL_", "GLOO_", "TORCH_DISTRIBUTED_")
WATCHED_VARIABLES = (
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "PYTORCH_CUDA_ALLOC_CONF",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
)


def collect_facts() -> EnvironmentFacts:
    """This process's facts; never imports torch when the job did not."""
    import ray

    torch = sys.modules.get("torch")
    shm = _disk("/dev/shm")
    return EnvironmentFacts(
        python=platform.python_version(),
        platform=platform.platform(terse=True),
        rankscope=__version__,
        ray=ray.__version__,
        torch=str(torch.__version__) if torch is not None else None,  # a TorchVersion would
        # make the CLI import torch (2 s) to unpickle the reply
        cuda=_torch_cuda_version(torch),
        nccl=_nccl_version(torch),
        gpus=_gpu_names(torch),
        shm_total_bytes=shm[0] if shm else None,
        shm_free_bytes=shm[1] if shm else None,
        variables={
            k: v
            for k, v in sorted(os.environ.items())
            if k in WATCHED_VARIABLES or k.startswith(WATCHED_VARIABLE_PREFIXES)
        },
    )


@register_handler("environment")
def _environment_command(args: dict[str, Any]) -> EnvironmentFacts:
    return collect_facts()


def _disk(path: str) -> tuple[int, int] | None:
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return None
    return usage.total, usage.free


def _torch_cuda_version(torch: Any) -> str | None:
    return None if torch is None else getattr(torch.version, "cuda", None)


def _nccl_version(torch: Any) -> str | None:
    """NCCL's own version call: a library query that starts no CUDA context."""
    try:
        if torch is None or not torch.version.cuda:
            return None
        return ".".join(str(p) for p in torch.cuda.nccl.version())
    except Exception:
        return None


def _gpu_names(torch: Any) -> tuple[str, ...]:
    """From torch only where the job already initialized CUDA; else from nvidia-smi.

    Asking torch for a device name initializes CUDA in this process, and a CUDA context costs
    about 500 MB of device memory: rankscope never creates one in a rank that did not.
    """
    try:
        if torch is not None and torch.cuda.is_initialized():
            return tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    except Exception:
        return ()
    return _nvidia_smi_names()


@functools.cache
def _nvidia_smi_names() -> tuple[str, ...]:
    """Asked once per process (the devices do not change), at most NVIDIA_SMI_TIMEOUT_S."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ()
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(line.strip() for line in out.stdout.splitlines() if line.strip())
