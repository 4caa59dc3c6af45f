"""The recording wrappers of torch.distributed's functions, one generated per function.

Each wrapper has its function's own signature (`all_reduce(tensor, op=..., group=None,
async_op=False)`): Python binds the arguments, the wrapper reads `group` and the tensors as
locals and calls through positionally, with the same default objects. The hot path reads
torch's sequence number and the clock, keeps the tensors' raw shapes and dtypes and the
caller's frame position, and stores one tuple into the recorder's preallocated ring: about a
microsecond, half of it in torch's and the clock's own calls. A function whose signature is
not plain (future torch) gets the same body behind `*args, **kwargs`.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from rankscope import level as _level
from rankscope.hang.model import CallState
from rankscope.hang.worker_callsite import (
    default_group_holder,
    default_pg_field,
    positional_tensors,
    tensor_metadata,
)
from rankscope.runtime.api import send_last_words

NOT_TENSORS = frozenset(
    ("op", "group", "async_op", "src", "dst", "tag", "group_src", "group_dst", "timeout")
) | frozenset(("device_ids", "wait_all_ranks", "output_split_sizes", "input_split_sizes", "device"))
"""Parameters of torch.distributed's functions that never carry the call's tensors."""

_BODY = """
def {name}({params}):
    if not _level.RECORDING:  # switched live to `off`: the call alone (one attribute read)
        return fn({args})
    try:
{bind}
        if pg is None:  # the default group, as it is now (it may be re-created)
            pg = world.{default_pg}
        try:
            entry = sites[pg]
        except KeyError:  # the group's first call of this op
            entry = sites[pg] = recorder.entry(op_name, p2p, pg)
        site, last_sequence, device = entry
        try:
            seq = last_sequence() + 1
        except Exception:
            seq = recorder.sequence(site)
        frame = getframe(1)
        generation = recorder.total
        recorder.total = generation + 1
        slot = generation % capacity
        calls[slot] = call = (
            generation, site, seq, shapes, dtypes, frame.f_code, frame.f_lasti, now()
        )
    except Exception:  # recording must never change the call
        return fn({args})
    try:
        result = fn({args})
    except BaseException as exc:
        recorder.complete(call, FAILED, exc)
        send_last_words()  # before a client that tears the group down kills us too
        raise
    if result is None:  # a synchronous call returned: done
        if device:
            recorder.returned_call(call)
        elif calls[slot] is call:
            done[slot] = (call, now(), COMPLETED, "")
        return None
    return recorder.result_of(call, result)
"""
_BODY_NAMES = frozenset(
    node.id
    for node in ast.walk(
        ast.parse(_BODY.format(name="f", params="", args="", bind=" " * 8 + "pass", default_pg="x"))
    )
    if isinstance(node, ast.Name)
) | {"T", "exc", "getattr", "isinstance", "positional_tensors", "tensor_metadata"}
"""A parameter named as one of these would shadow it: such a function gets the generic body."""


def wrap(op: str, fn: Callable[..., Any], recorder: Any, p2p: bool) -> Any:
    """`fn`, recording each call into `recorder`'s ring."""
    names: list[str] = []
    defaults: dict[str, Any] = {}
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        parameters = [None]  # type: ignore[list-item]  # no signature: the generic wrapper
    for i, p in enumerate(parameters):
        if p is None or p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
            names = []
            break
        names.append(p.name)
        if p.default is not inspect.Parameter.empty:
            defaults[f"_d{i}"] = p.default
    if names and not set(names) & _BODY_NAMES:
        params = ", ".join(f"{n}=_d{i}" if f"_d{i}" in defaults else n for i, n in enumerate(names))
        args, bind = ", ".join(names), _bind(op, names)
    else:
        params = args = "*args, **kwargs"
        bind = _bind_generic([p.name for p in parameters if p is not None])
    world = default_group_holder()
    namespace: dict[str, Any] = {
        **defaults,
        "fn": fn, "_level": _level, "recorder": recorder, "op_name": op, "p2p": p2p,
        "sites": {}, "calls": recorder._calls, "done": recorder._done,
        "capacity": recorder.capacity, "getframe": sys._getframe, "now": time.time,
        "FAILED": CallState.FAILED, "COMPLETED": CallState.COMPLETED,
        "send_last_words": send_last_words, "world": world,
        "tensor_metadata": tensor_metadata, "positional_tensors": positional_tensors,
        "T": _tensor_type(),
    }  # fmt: skip
    source = _BODY.format(
        name=fn.__name__, params=params, args=args, bind=bind, default_pg=default_pg_field(world)
    )
    exec(compile(source, _source_file(op, source), "exec"), namespace)
    recorded = namespace[fn.__name__]
    recorded.__wrapped__ = fn
    recorded.__doc__ = fn.__doc__
    return recorded


def _bind(op: str, names: list[str]) -> str:
    """Code that sets `pg` and `shapes, dtypes` from the wrapper's own parameters."""
    if op == "batch_isend_irecv" and names == ["p2p_op_list"]:
        lines = [
            'pg = getattr(p2p_op_list[0], "group", None) if p2p_op_list else None',
            "shapes, dtypes = tensor_metadata([p.tensor for p in p2p_op_list])",
        ]
    else:
        lines = ["pg = group" if "group" in names else "pg = None"]
        tensors = [n for n in names if n not in NOT_TENSORS]
        if len(tensors) == 1:  # the common case, without building lists
            t = tensors[0]
            lines += [
                f"if isinstance({t}, T):",
                f"    shapes, dtypes = {t}.shape, {t}.dtype",
                "else:",
                f"    shapes, dtypes = tensor_metadata(positional_tensors(({t},), T))",
            ]
        else:
            listed = "".join(f"{t}, " for t in tensors)
            lines.append(f"shapes, dtypes = tensor_metadata(positional_tensors(({listed}), T))")
    return "\n".join(" " * 8 + line for line in lines)


def _bind_generic(names: list[str]) -> str:
    """`_bind` for a wrapper of `*args, **kwargs`: the group by keyword or position."""
    group_at = names.index("group") if "group" in names else 1 << 30
    lines = [
        'pg = kwargs.get("group") if kwargs else None',
        f"if pg is None and len(args) > {group_at}:",
        f"    pg = args[{group_at}]",
        "shapes, dtypes = tensor_metadata(positional_tensors(args, T))",
    ]
    return "\n".join(" " * 8 + line for line in lines)


def _tensor_type() -> type:
    import torch

    return torch.Tensor


def _source_file(op: str, source: str) -> str:
    """Where the generated wrapper says its code is: a path in this package, so stacks and
    tracebacks count its frame as rankscope's (library), never the user's; its text is put in
    `linecache` so a traceback still shows it."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"_recorded_{op}.py")
    linecache.cache[path] = (len(source), None, source.splitlines(True), path)
    return path
