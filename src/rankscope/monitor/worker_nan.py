"""`watch_nan(model, optimizer=None)`: the first module whose output or gradient is NaN/Inf.

Far cheaper than `torch.autograd.detect_anomaly(check_nan=True)`: no stack trace per op and no
check per backward op. Each leaf module's `forward` is wrapped (an instance attribute: the module
keeps torch's hook-free fast call path, which a forward hook would leave, at ~7 us a module on a
tiny model) to keep one reduction of its output on the device (`out.sum()`: NaN/Inf stays
NaN/Inf), no sync; once a step (at the optimizer's step, else at `rankscope.step()`) those and
the gradients' norms (one fused `_foreach_norm`) are summed into one number and read once. Only
when it is not finite are they looked at one by one, to name the first.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rankscope import level as _level
from rankscope.monitor.worker import step_recorder
from rankscope.runtime.probe import progress, register_step_hook

__all__ = ["NanWatch", "watch_nan"]

MAX_PENDING = 4096
"""Outputs kept between checks; past it (no optimizer step, no `rankscope.step()`) one check runs
in the forward, so the list stays bounded."""


FINITE_IN_FINITE_OUT = frozenset(
    ("ReLU", "ReLU6", "LeakyReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "Identity", "Flatten")
)
"""torch's modules whose output is non-finite only when their input is: not watched (the module
before them already was), one check less per call."""


class _Watched:
    """A leaf module's `forward`: the original call, then its output's sum kept on the device."""

    __slots__ = ("name", "original", "watch")

    def __init__(self, watch: NanWatch, name: str, original: Any) -> None:
        self.watch, self.name, self.original = watch, name, original

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self.original(*args, **kwargs)
        if self.watch.handles and _level.RECORDING:
            try:
                o = out[0] if isinstance(out, (tuple, list)) and out else out
                if o.is_floating_point():
                    sums = self.watch.sums
                    sums.append((self.name, o.detach().sum()))
                    if len(sums) > MAX_PENDING:
                        self.watch.check()
            except Exception:
                pass
        return out

    def __reduce__(self) -> Any:
        """A pickled or deep-copied model keeps its own forward, unwatched."""
        return self.original.__reduce__()


@dataclass(eq=False)
class NanWatch:
    """The hooks `watch_nan` installed; `remove()` takes them out."""

    model: Any
    optimizer: Any = None
    handles: list[Any] = field(default_factory=list)
    sums: list[tuple[str, Any]] = field(default_factory=list)
    """(module name, its output's sum on the device) since the last check, in forward order."""
    found: str = ""
    """The first non-finite, once seen: `activation in layers.1 (output)`."""
    _params: list[tuple[str, Any]] = field(default_factory=list)
    _wrapped: list[tuple[Any, _Watched, Any]] = field(default_factory=list)
    """(module, our forward, the instance forward it replaced or None)."""

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()  # also switches off a wrapper that someone wrapped again
        for module, ours, before in self._wrapped:
            if module.__dict__.get("forward") is ours:
                if before is None:
                    del module.forward
                else:
                    module.forward = before
        self._wrapped.clear()
        with _lock:
            if self in _watches:
                _watches.remove(self)

    def check(self, step: int | None = None, *, with_grads: bool = True) -> str:
        """Check the outputs and gradients since the last check (one device read); clears.
        `with_grads=False`: the outputs only (the optimizer skipped its step: AMP's scaler found
        inf gradients at its scale, which it handles, not a fault)."""
        import torch

        sums, self.sums = self.sums, []
        if self.found or not _level.RECORDING:  # level `off`: no check, nothing recorded
            return self.found
        if not self._params:
            self._params = list(self.model.named_parameters())
        params = self._params if with_grads else []
        grads = [(n, p.grad) for n, p in params if p.grad is not None]
        values = [s for _, s in sums] + [g for _, g in grads]
        if not values or not _any_nonfinite(values):  # a healthy step: one fused op, one read
            return ""
        bad_at = [i for i, v in enumerate(values) if not bool(torch.isfinite(v).all())]
        if not bad_at:
            return ""
        if bad_at[0] < len(sums):
            bad = bad_at[0]
            name, kind = sums[bad][0], "activation"
            place = f"activation in {name or 'model'} (output)"
        else:
            bad = bad_at[-1] - len(sums)  # backward runs last layer first
            param = grads[bad][0]
            name, kind = param.rpartition(".")[0], "gradient"
            place = f"gradient in {name or 'model'} ({param})"
        self.found = place
        at = step if step is not None else progress.step
        value = float("nan")
        tensor = "output" if kind == "activation" else grads[bad][0]
        step_recorder().nonfinite(at, progress.last_progress, kind, value, name, tensor)
        return place


_flags: dict[Any, tuple[Any, Any]] = {}
"""Per device: the found-non-finite flag and the scale 1 of the fused check."""


def _any_nonfinite(tensors: list[Any]) -> bool:
    """Whether any value of these tensors is NaN/Inf: AMP's fused check (what GradScaler uses:
    one kernel for all, its flag kept on the device) with a scale of 1, so nothing changes;
    then one read of the flag. Per device and dtype where one call refuses the mix."""
    import torch

    try:
        try:
            return _fused_check([tensors])
        except RuntimeError:
            groups: dict[Any, list[Any]] = {}
            for t in tensors:
                groups.setdefault((t.device, t.dtype), []).append(t)
            return _fused_check(list(groups.values()))
    except (RuntimeError, NotImplementedError, AttributeError):  # no fused check here
        first = tensors[0].device
        norms = [n.to(first, torch.float32) for n in torch._foreach_norm(tensors)]
        return not math.isfinite(torch.stack(norms).sum().item())


def _fused_check(groups: list[list[Any]]) -> bool:
    import torch

    used = []
    for tensors in groups:
        device = tensors[0].device
        flags = _flags.get(device)
        if flags is None:
            flags = _flags[device] = (torch.zeros(1, device=device), torch.ones(1, device=device))
        torch._amp_foreach_non_finite_check_and_unscale_(tensors, *flags)
        used.append(flags[0])
    found = any(bool(f.item()) for f in used)  # one group, one read, as a rule
    if found:
        for f in used:
            f.zero_()
    return found


_watches: list[NanWatch] = []
_lock = threading.Lock()


def watch_nan(model: Any, optimizer: Any = None) -> NanWatch:
    """Name the first module whose output or gradient turns NaN/Inf (opt-in, cheap).

    Example: `watch = rankscope.watch_nan(model, optimizer)`; the finding reaches
    `rankscope monitor` with the rank, the step and the module. Checks once a step, at
    `optimizer.step()` when given (before the update, so the weights stay finite for the
    report), else at `rankscope.step()`; that check reads one flag from the device.
    """
    watch = NanWatch(model, optimizer)
    for name, module in model.named_modules():
        if next(iter(module.children()), None) is not None:
            continue  # leaf modules only: a parent's output is its last child's
        if type(module).__name__ in FINITE_IN_FINITE_OUT and type(module).__module__.startswith(
            "torch.nn"
        ):
            continue
        ours = _Watched(watch, name, module.forward)
        watch._wrapped.append((module, ours, module.__dict__.get("forward")))
        module.forward = ours
    watch.handles.append(_Alive())  # wrappers work while `handles` is not empty
    if optimizer is not None:
        ref = weakref.ref(watch)

        def before_step(opt: Any, args: Any, kwargs: Any) -> None:
            w = ref()
            if w is not None:  # the step `rankscope.step()` will count when it comes
                _safe(lambda: w.check(progress.step + 1))

        watch.handles.append(optimizer.register_step_pre_hook(before_step))
    with _lock:
        _watches.append(watch)
    return watch


class _Alive:
    """Stands in `handles` for the wrapped forwards (which have no handle of their own)."""

    def remove(self) -> None:
        pass


def _safe(fn: Callable[[], Any]) -> None:
    with contextlib.suppress(Exception):
        fn()


@register_step_hook
def _check_at_step() -> None:
    if not _watches:
        return
    for w in list(_watches):
        if w.optimizer is None:
            _safe(w.check)
        elif w.sums:  # it skipped its step (AMP's scaler, inf gradients): the outputs only
            _safe(functools.partial(w.check, with_grads=False))
