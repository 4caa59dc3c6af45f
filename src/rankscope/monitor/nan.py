"""`watch_nan(model, optimizer=None)`: the first module whose output or gradient is NaN/Inf.

Far cheaper than `torch.autograd.detect_anomaly(check_nan=True)`: no stack trace per op and no
check per backward op. A forward hook per module keeps one reduction of its output on the device
(`out.sum()`: NaN/Inf stays NaN/Inf), no sync; once a step (at the optimizer's step, else at
`rankscope.step()`) one check of all of them and of the gradients' norms (one fused
`_foreach_norm`) reads a single flag from the device. Only when that flag says non-finite are the
modules looked at one by one, to name the first.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rankscope import level as _level
from rankscope.monitor.recorder import step_recorder
from rankscope.runtime.probe import progress, register_step_hook

__all__ = ["NanWatch", "watch_nan"]


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
    _names: dict[int, str] = field(default_factory=dict)
    _params: list[tuple[str, Any]] = field(default_factory=list)

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()
        with _lock:
            if self in _watches:
                _watches.remove(self)

    def check(self, step: int | None = None) -> str:
        """Check the outputs and gradients since the last check (one device read); clears."""
        import torch

        sums, self.sums = self.sums, []
        if self.found or not _level.RECORDING:  # level `off`: no check, nothing recorded
            return self.found
        if not self._params:
            self._params = list(self.model.named_parameters())
        grads = [(n, p.grad) for n, p in self._params if p.grad is not None]
        values = [s for _, s in sums]
        if grads:
            values += torch._foreach_norm([g for _, g in grads])
        if not values:
            return ""
        flags = torch.isfinite(torch.stack(values).float())
        if bool(flags.all()):  # the one device read of a healthy step
            return ""
        bad_at = [i for i, ok in enumerate(flags.tolist()) if not ok]
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

    def _hook(self, module: Any, inputs: Any, output: Any) -> None:
        if not _level.RECORDING:
            return
        try:
            out = output[0] if isinstance(output, tuple | list) and output else output
            if hasattr(out, "is_floating_point") and out.is_floating_point():
                self.sums.append((self._names.get(id(module), ""), out.detach().sum()))
        except Exception:
            pass


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
        watch._names[id(module)] = name
        watch.handles.append(module.register_forward_hook(watch._hook))
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


def _safe(fn: Callable[[], Any]) -> None:
    with contextlib.suppress(Exception):
        fn()


@register_step_hook
def _check_at_step() -> None:
    if not _watches:
        return
    for w in list(_watches):
        if w.optimizer is None or w.sums:  # with an optimizer: it skipped its step (AMP does)
            _safe(w.check)
