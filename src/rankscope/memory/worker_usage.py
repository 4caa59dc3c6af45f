"""`profile_memory_usage`: peak memory per phase (forward, backward) and per top-level module.

On CUDA the numbers come from the caching allocator's peak counters; on the host from the
kernel's resident high-water mark (VmHWM, reset through /proc/self/clear_refs), falling back to
RSS differences where that is not available. On both, the bytes each module saves for backward
(its activations: what activation checkpointing would free) are counted exactly through autograd's
saved-tensor hooks.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rankscope.memory import worker_snapshot as snap
from rankscope.units import human_bytes


@dataclass(frozen=True)
class PhaseMemory:
    name: str
    """`forward` or `backward`."""
    peak_increase: int
    """Highest memory during the phase minus memory when it began."""
    retained: int
    """Memory when the phase ended minus when it began (forward: activations kept)."""
    seconds: float


@dataclass(frozen=True)
class ModuleMemory:
    name: str
    type: str
    params: int
    activations: int
    """Bytes saved for backward inside this module (excluding parameters)."""
    output: int
    peak_increase: int
    """Highest memory while its forward ran minus memory when it began."""


@dataclass(frozen=True)
class MemoryUsageProfile:
    """What `profile_memory_usage` found; `str(profile)` is a table."""

    device: str
    source: str
    """Where the peaks come from: `cuda allocator`, `host VmHWM` or `host RSS`."""
    phases: tuple[PhaseMemory, ...]
    modules: tuple[ModuleMemory, ...]

    @property
    def largest_module(self) -> ModuleMemory | None:
        """The module whose activations (else peak) are largest: checkpoint or offload it."""
        if not self.modules:
            return None
        return max(self.modules, key=lambda m: (m.activations, m.peak_increase))

    def table(self) -> str:
        lines = [f"memory per phase ({self.device}, peaks from {self.source})"]
        for p in self.phases:
            lines.append(
                f"  {p.name:<10} peak +{human_bytes(p.peak_increase):>11}   "
                f"retained {human_bytes(p.retained):>11}   {p.seconds * 1000:.1f} ms"
            )
        lines.append("per top-level module (forward)")
        lines.append(
            f"  {'module':<24} {'type':<16} {'params':>11} {'activations':>12} "
            f"{'output':>11} {'peak +':>11}"
        )
        for m in self.modules:
            lines.append(
                f"  {m.name:<24} {m.type:<16} {human_bytes(m.params):>11} "
                f"{human_bytes(m.activations):>12} {human_bytes(m.output):>11} "
                f"{human_bytes(m.peak_increase):>11}"
            )
        top = self.largest_module
        if top is not None and top.activations > 0:
            lines.append(f"largest activations: {top.name} ({human_bytes(top.activations)})")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


class _Meter:
    """Current and peak memory, with a peak that can be reset."""

    def __init__(self, device: int | None) -> None:
        self.device = device
        self.source = "cuda allocator" if device is not None else "host VmHWM"
        if device is None and _read_hwm() is None:
            self.source = "host RSS"

    def current(self) -> int:
        if self.device is not None:
            torch = snap.torch_if_loaded()
            return int(torch.cuda.memory_allocated(self.device))
        return snap.host_memory(uss=False)[0]

    def peak(self) -> int:
        if self.device is not None:
            torch = snap.torch_if_loaded()
            return int(torch.cuda.max_memory_allocated(self.device))
        hwm = _read_hwm()
        return hwm if hwm is not None else self.current()

    def reset(self) -> None:
        if self.device is not None:
            snap.torch_if_loaded().cuda.reset_peak_memory_stats(self.device)
            return
        with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS


class _Window:
    """Peak above the start of a stretch of code, across nested resets of the meter."""

    def __init__(self, meter: _Meter) -> None:
        self.meter = meter
        self.start = meter.current()
        self.highest = self.start
        meter.reset()

    def fold(self) -> None:
        self.highest = max(self.highest, self.meter.peak())

    def close(self) -> tuple[int, int]:
        self.fold()
        end = self.meter.current()
        return max(0, self.highest - self.start), end - self.start


def profile_memory_usage(
    model: Any,
    data: Any,
    *,
    loss_fn: Callable[[Any], Any] | None = None,
) -> MemoryUsageProfile:
    """One forward (and backward with `loss_fn`), measured per phase and per top-level module.

    Example: `print(rankscope.profile_memory_usage(model, batch, loss_fn=lambda out: out.sum()))`.
    `data` is one input, a tuple of positional inputs, or a dict of keyword inputs. The model's
    gradients are left as they were.
    """
    import torch

    params = list(model.parameters())
    device = next((p.device for p in params if p.device.type == "cuda"), None)
    index = snap.cuda_device_index(device) if device is not None else None
    meter = _Meter(index)
    param_storages = {p.untyped_storage().data_ptr() for p in params}
    children = list(model.named_children()) or [("(model)", model)]
    modules: dict[str, _ModuleTally] = {
        name: _ModuleTally(name, type(m).__name__, snap.tensor_bytes(m.parameters()))
        for name, m in children
    }
    stack: list[_ModuleTally] = []
    windows: list[_Window] = []
    saved_seen: set[int] = set()

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if stack and ptr not in param_storages and ptr not in saved_seen:
            saved_seen.add(ptr)
            stack[-1].activations += t.untyped_storage().nbytes()
        return t

    def pre_hook(tally: _ModuleTally) -> Callable[..., None]:
        def hook(module: Any, args: Any) -> None:
            for w in windows:
                w.fold()
            windows.append(_Window(meter))
            stack.append(tally)

        return hook

    def post_hook(tally: _ModuleTally) -> Callable[..., None]:
        def hook(module: Any, args: Any, output: Any) -> None:
            window = windows.pop()
            peak, _ = window.close()
            for w in windows:  # the outer windows saw the inner peak too
                w.highest = max(w.highest, window.highest)
            tally.peak_increase = max(tally.peak_increase, peak)
            tally.output += snap.tensor_bytes(_tensors(output))
            stack.pop()

        return hook

    old_grads = [p.grad for p in params]
    handles = []
    for name, m in children:
        handles.append(m.register_forward_pre_hook(pre_hook(modules[name])))
        handles.append(m.register_forward_hook(post_hook(modules[name])))
    phases: list[PhaseMemory] = []
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            started = time.perf_counter()
            window = _Window(meter)
            windows.append(window)
            output = _call(model, data)
            windows.pop()
            peak, retained = window.close()
            phases.append(PhaseMemory("forward", peak, retained, time.perf_counter() - started))
        if loss_fn is not None:
            loss = loss_fn(output)
            started = time.perf_counter()
            window = _Window(meter)
            loss.backward()
            peak, retained = window.close()
            phases.append(PhaseMemory("backward", peak, retained, time.perf_counter() - started))
            del loss
        del output
    finally:
        for h in handles:
            h.remove()
        for p, g in zip(params, old_grads, strict=True):
            p.grad = g
    return MemoryUsageProfile(
        device=str(device) if device is not None else "cpu",
        source=meter.source,
        phases=tuple(phases),
        modules=tuple(t.freeze() for t in modules.values()),
    )


@dataclass
class _ModuleTally:
    name: str
    type: str
    params: int
    activations: int = 0
    output: int = 0
    peak_increase: int = 0

    def freeze(self) -> ModuleMemory:
        return ModuleMemory(
            self.name, self.type, self.params, self.activations, self.output, self.peak_increase
        )


def _call(model: Any, data: Any) -> Any:
    if isinstance(data, dict):
        return model(**data)
    if isinstance(data, tuple | list):
        return model(*data)
    return model(data)


def _tensors(value: Any) -> Iterator[Any]:
    torch = snap.torch_if_loaded()
    if torch is not None and torch.is_tensor(value):
        yield value
    elif isinstance(value, tuple | list):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _read_hwm() -> int | None:
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
