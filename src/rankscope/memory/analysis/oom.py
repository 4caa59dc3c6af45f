"""Out-of-memory forensics: the numbers in torch's message, and which verdict explains them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from rankscope.memory.analysis.verdicts import (
    Finding,
    MemoryThresholds,
    Verdict,
    cuda_findings,
)
from rankscope.memory.model import MemorySnapshot
from rankscope.units import human_bytes


@dataclass(frozen=True)
class CudaOomMessage:
    """The numbers torch puts in a CUDA out-of-memory message (None where absent)."""

    requested: int | None = None
    total: int | None = None
    free: int | None = None
    process_in_use: int | None = None
    """This process, including memory outside PyTorch."""
    allocated: int | None = None
    reserved_unallocated: int | None = None
    other_processes: int = 0
    """Memory in use by other processes the message names."""


_SIZE = r"([\d.]+) (bytes|KiB|MiB|GiB|TiB)"


_UNITS = {"bytes": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}


_OOM_PATTERNS = {
    "requested": rf"Tried to allocate {_SIZE}",
    "total": rf"total capacity of {_SIZE}|{_SIZE} total capacity",
    "free": rf"of which {_SIZE} is free|{_SIZE} free",
    "process_in_use": rf"this process has {_SIZE} memory in use",
    "allocated": rf"{_SIZE} is allocated by PyTorch|{_SIZE} already allocated",
    "reserved_unallocated": rf"{_SIZE} is reserved by PyTorch but unallocated",
}


_OLD_RESERVED = rf"{_SIZE} reserved in total by PyTorch"


_OTHER_PROCESS = rf"Process \d+ has {_SIZE} memory in use"


def _size(groups: Sequence[str | None]) -> int | None:
    values = [g for g in groups if g is not None]
    if len(values) < 2:
        return None
    return int(float(values[0]) * _UNITS[values[1]])


def parse_cuda_oom(message: str) -> CudaOomMessage | None:
    """The numbers of torch's `CUDA out of memory` message (torch 1.x and 2.x wordings)."""
    if "out of memory" not in message:
        return None
    values: dict[str, int | None] = {}
    for name, pattern in _OOM_PATTERNS.items():
        m = re.search(pattern, message)
        values[name] = _size(m.groups()) if m else None
    if values["reserved_unallocated"] is None and values["allocated"] is not None:
        m = re.search(_OLD_RESERVED, message)
        reserved = _size(m.groups()) if m else None
        if reserved is not None:
            values["reserved_unallocated"] = max(0, reserved - values["allocated"])
    others = sum(_size(m.groups()) or 0 for m in re.finditer(_OTHER_PROCESS, message))
    return CudaOomMessage(other_processes=others, **values)


@dataclass(frozen=True)
class OomEvidence:
    """What `oom_guard` saw when the error came."""

    error_type: str
    message: str
    snapshot: MemorySnapshot | None
    phase: str | None = None
    """`forward` or `backward` when the traceback went through one, else None."""
    where: str = ""
    """The innermost user frame of the traceback, `file.py:123 in fn`."""


@dataclass(frozen=True)
class OomReport:
    """`oom_guard`'s verdicts, most likely first, and the numbers behind them."""

    error_type: str
    where: str
    phase: str | None
    findings: tuple[Finding, ...]
    parsed: CudaOomMessage | None
    snapshot: MemorySnapshot | None
    time: float = 0.0
    label: str = ""
    path: str = ""
    """Where the verdict was written."""
    extra: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        head = f"rankscope oom_guard: {self.error_type}"
        if self.where:
            head += f" at {self.where}"
        if self.phase:
            head += f" (during {self.phase})"
        lines = [head]
        for f in self.findings:
            lines.append(f"  {f.verdict.value}: {f.message}; {f.advice}")
        if self.extra.get("co_tenants"):
            lines.append(f"  co-tenants: {self.extra['co_tenants']}")
        if self.path:
            lines.append(f"  verdict written to {self.path}")
        return "\n".join(lines)


def classify_oom(
    evidence: OomEvidence, thresholds: MemoryThresholds | None = None
) -> tuple[Finding, ...]:
    """Why memory ran out, most likely cause first."""
    th = thresholds or MemoryThresholds()
    found: list[Finding] = []
    snap = evidence.snapshot
    host_error = evidence.error_type == "MemoryError" or "DefaultCPUAllocator" in evidence.message
    if snap is not None and snap.node_total > 0:
        low = snap.node_available / snap.node_total < th.host_exhausted_fraction
        if host_error or low:
            found.append(
                Finding(
                    Verdict.HOST_EXHAUSTED,
                    f"node has {human_bytes(snap.node_available)} of "
                    f"{human_bytes(snap.node_total)} available; this process holds "
                    f"{human_bytes(snap.rss)} RSS",
                )
            )
    elif host_error:
        found.append(Finding(Verdict.HOST_EXHAUSTED, "host allocation failed"))
    parsed = parse_cuda_oom(evidence.message) if not host_error else None
    if parsed is not None:
        found.extend(_message_findings(parsed, th))
    elif snap is not None and snap.cuda is not None:
        found.extend(
            f
            for f in cuda_findings(snap.cuda, th)
            if f.verdict in (Verdict.FRAGMENTATION, Verdict.OUTSIDE_PYTORCH)
        )
    if evidence.phase in ("forward", "backward") and not host_error:
        found.append(
            Finding(Verdict.ACTIVATIONS, f"out of memory during {evidence.phase}: activations")
        )
    if not found and not host_error:
        found.append(_tensors_fill(parsed, snap))
    return tuple(found)


def _message_findings(p: CudaOomMessage, th: MemoryThresholds) -> list[Finding]:
    found: list[Finding] = []
    requested = p.requested or 0
    unallocated = p.reserved_unallocated or 0
    allocated = p.allocated or 0
    reserved = allocated + unallocated
    if unallocated > 0 and (
        unallocated >= requested
        or unallocated >= max(th.fragmentation_fraction * reserved, th.fragmentation_min)
    ):
        found.append(
            Finding(
                Verdict.FRAGMENTATION,
                f"asked for {human_bytes(requested)} while {human_bytes(unallocated)} was "
                f"reserved by PyTorch but unallocated (allocated {human_bytes(allocated)})",
            )
        )
    if p.total and p.process_in_use is not None:
        outside = max(0, p.process_in_use - reserved) + p.other_processes
        if outside >= max(th.outside_fraction * p.total, th.outside_min):
            found.append(
                Finding(
                    Verdict.OUTSIDE_PYTORCH,
                    f"{human_bytes(outside)} of the GPU's {human_bytes(p.total)} is outside "
                    f"PyTorch's {human_bytes(reserved)} (other processes: "
                    f"{human_bytes(p.other_processes)})",
                )
            )
    return found


def _tensors_fill(parsed: CudaOomMessage | None, snap: MemorySnapshot | None) -> Finding:
    parts = []
    if parsed is not None and parsed.allocated is not None:
        parts.append(f"PyTorch tensors hold {human_bytes(parsed.allocated)}")
        if parsed.total:
            parts[-1] += f" of {human_bytes(parsed.total)}"
    if snap is not None:
        held = {
            "parameters": snap.params,
            "gradients": snap.grads,
            "optimizer state": snap.optimizer_state,
        }
        parts.extend(f"{k} {human_bytes(v)}" for k, v in held.items() if v)
    return Finding(Verdict.TENSORS_FILL_DEVICE, ", ".join(parts) or "no numbers available")


def phase_of(functions: Sequence[tuple[str, str]]) -> str | None:
    """`backward` or `forward` from a traceback's (function, filename) frames, outermost first."""
    for fn, filename in functions:
        if fn in ("backward", "_engine_run_backward") and "torch" in filename:
            return "backward"
    for fn, filename in functions:
        if fn in ("_call_impl", "_wrapped_call_impl") and "torch/nn" in filename:
            return "forward"
    for fn, _ in functions:
        if fn == "forward":
            return "forward"
    return None
