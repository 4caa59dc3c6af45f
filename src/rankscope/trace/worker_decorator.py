"""`debug_decorator`: a span around a function, with its arguments, time and memory delta.

Works on functions, methods, and under `@ray.remote` (remote functions and actor methods), sync
and async. Arguments are captured as bounded reprs (a tensor as its shape, dtype and device,
never its data). A call that raises, or takes longer than `slow_s`, is also sent to the hub as
an event (`trace.call_failed`, `trace.slow_call`), traced or not.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

from rankscope import level
from rankscope.runtime.api import current_probe
from rankscope.runtime.probe import progress
from rankscope.trace import worker_spans

__all__ = ["arg_repr", "debug_decorator"]

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger("rankscope.trace")
REPR_CHARS = 120
"""Longest repr of one argument."""
MAX_ARGS = 16
SLOW_S = 1.0
_process: Any = None


def arg_repr(value: Any, limit: int = REPR_CHARS) -> str:
    """A bounded repr: tensors (and arrays) as `Tensor(float32[4, 8], cpu)`, never their data.

    Example: `arg_repr(torch.ones(2, 3))` is `'Tensor(float32[2, 3], cpu)'`.
    """
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        dims = ", ".join(str(int(d)) for d in shape)
        device = getattr(value, "device", None)
        where = f", {device}" if device is not None else ""
        kind = type(value).__name__
        return f"{kind}({str(dtype).removeprefix('torch.')}[{dims}]{where})"
    try:
        text = repr(value)
    except Exception as exc:  # a broken __repr__ must not break the call
        text = f"<{type(value).__name__}: repr failed: {type(exc).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _captured(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, str]:
    code = getattr(fn, "__code__", None)
    names = code.co_varnames[: code.co_argcount] if code is not None else ()
    out: dict[str, str] = {}
    for i, value in enumerate(args[:MAX_ARGS]):
        name = names[i] if i < len(names) else f"arg{i}"
        if i == 0 and name in ("self", "cls"):
            continue
        out[name] = arg_repr(value)
    for name, value in list(kwargs.items())[: max(0, MAX_ARGS - len(out))]:
        out[name] = arg_repr(value)
    return out


def _memory() -> tuple[int, int | None, int | None]:
    """Host RSS, and CUDA allocated and peak bytes when this process uses CUDA."""
    global _process
    import psutil

    if _process is None:
        _process = psutil.Process()
    rss = int(_process.memory_info().rss)
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                return (
                    rss,
                    int(torch.cuda.memory_allocated()),
                    int(torch.cuda.max_memory_allocated()),
                )
        except Exception:
            pass
    return rss, None, None


class _Call:
    """One call's bookkeeping: what to record when it ends."""

    __slots__ = ("args", "mem", "start", "start_ns")

    def __init__(self, memory: bool, capture: dict[str, str] | None) -> None:
        self.args = capture
        self.mem = _memory() if memory else None
        self.start_ns = time.time_ns()
        self.start = time.perf_counter()


def debug_decorator(
    capture_args: bool | Callable[..., Any] = False,
    log_execution_time: bool = True,
    memory_monitoring: bool = False,
    *,
    sample_every: int = 1,
    slow_s: float = SLOW_S,
) -> Any:
    """A span around every call, with its arguments, time and memory delta when asked.

    Example: `@rankscope.debug_decorator(capture_args=True, memory_monitoring=True)`.
    Arguments and memory are taken on every `sample_every`-th call (memory costs ~10 us), and
    also while the debug level is `full` (`rankscope level full`), then on the steps that
    `rankscope.configure(sample_every=N)` samples (every Nth `rankscope.step()`); the span
    itself only while tracing is on. Usable bare: `@rankscope.debug_decorator`.
    """
    if callable(capture_args):  # bare `@debug_decorator`
        return debug_decorator()(capture_args)
    if sample_every < 1:
        raise ValueError(f"sample_every must be >= 1, got {sample_every}")

    def decorate(fn: F) -> F:
        name = getattr(fn, "__qualname__", getattr(fn, "__name__", "call"))
        calls = [0]

        def begin(args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Call:
            calls[0] += 1
            sampled = (calls[0] - 1) % sample_every == 0
            # `rankscope level full` captures too, on the steps `configure(sample_every=N)`
            # samples; below full this costs the one attribute read
            full = level.FULL and level.full_at(progress.step)
            capture = None
            if (capture_args and sampled) or full:
                try:
                    capture = _captured(fn, args, kwargs)
                except Exception:
                    capture = None
            return _Call((memory_monitoring and sampled) or full, capture)

        def end(call: _Call, error: BaseException | None) -> None:
            try:
                _finish(name, call, error, log_execution_time, slow_s)
            except Exception:  # never let our bookkeeping change the call
                log.debug("rankscope debug_decorator failed for %s", name, exc_info=True)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def traced_async(*args: Any, **kwargs: Any) -> Any:
                call = begin(args, kwargs)
                try:
                    result = await fn(*args, **kwargs)
                except BaseException as exc:
                    end(call, exc)
                    raise
                end(call, None)
                return result

            return traced_async  # type: ignore[return-value]

        @functools.wraps(fn)
        def traced(*args: Any, **kwargs: Any) -> Any:
            call = begin(args, kwargs)
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                end(call, exc)
                raise
            end(call, None)
            return result

        return traced  # type: ignore[return-value]

    return decorate


def _finish(
    name: str, call: _Call, error: BaseException | None, log_time: bool, slow_s: float
) -> None:
    elapsed = time.perf_counter() - call.start
    attrs: dict[str, Any] = {}
    if call.args:
        attrs["args"] = call.args
    if call.mem is not None:
        rss, cuda, _ = call.mem
        rss_after, cuda_after, peak_after = _memory()
        attrs["rss_delta_bytes"] = rss_after - rss
        if cuda is not None and cuda_after is not None:
            attrs["cuda_delta_bytes"] = cuda_after - cuda
            attrs["cuda_peak_bytes"] = peak_after
    if error is not None:
        attrs["error"] = f"{type(error).__name__}: {error}"[:200]
    if worker_spans.recording() is not None:
        worker_spans.record_span(name, call.start_ns, attrs or None)
    if log_time:
        log.debug("%s took %.3f ms", name, elapsed * 1e3)
    if (error is not None or elapsed >= slow_s) and level.RECORDING:  # live `off`: no events
        probe = current_probe()
        if probe is not None:
            kind = "trace.call_failed" if error is not None else "trace.slow_call"
            summary = f"{name} {'raised ' + attrs['error'] if error else 'took'} ({elapsed:.3f} s)"
            probe.emit(kind, {"summary": summary, "function": name, "seconds": elapsed, **attrs})
