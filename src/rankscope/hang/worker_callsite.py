"""What the collective recorder keeps of a call, cheaply, and what it becomes in a record.

Per call the recorder keeps raw values: the tensors' `torch.Size` and dtype objects and the
caller's code object with its bytecode offset. Their text (`float32`, `train.py:88`) is made
only when a snapshot freezes the slot: the caller's line number alone is a scan of its code's
line table, which `frame.f_lineno` would pay on every collective.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from types import CodeType
from typing import Any

from rankscope.hang.model import caller_text

_CALLERS: dict[tuple[int, int], tuple[CodeType, str]] = {}
"""(id(code), offset) -> (code, "file:line"); the code is kept to tell a reused id apart."""
_MAX_CALLERS = 4096


def caller_at(code: CodeType | None, at: Any) -> str:
    """`file:line` of a caller kept as (code, bytecode offset), or as a (file, line) pair."""
    if code is None:
        return caller_text(at)
    key = (id(code), at)
    known = _CALLERS.get(key)
    if known is not None and known[0] is code:
        return known[1]
    text = f"{code.co_filename}:{line_at(code, at)}"
    if len(_CALLERS) >= _MAX_CALLERS:
        _CALLERS.clear()
    _CALLERS[key] = (code, text)
    return text


def line_at(code: CodeType, offset: int) -> int:
    """The line of the instruction at `offset` (`f_lasti`), as `frame.f_lineno` gives it."""
    if offset < 0:
        return code.co_firstlineno
    for start, end, line in code.co_lines():
        if start <= offset < end:
            return -1 if line is None else line
    return -1


def positional_tensors(args: Sequence[Any], tensor_type: Any) -> list[Any]:
    """The tensors a call's positional arguments carry: each tensor, each list's first."""
    return [
        a if isinstance(a, tensor_type) else a[0]
        for a in args
        if isinstance(a, tensor_type)
        or (isinstance(a, list) and a and isinstance(a[0], tensor_type))
    ]


def tensor_metadata(tensors: Sequence[Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The tensors' raw shapes and dtypes, as two tuples."""
    return tuple([t.shape for t in tensors]), tuple([t.dtype for t in tensors])


def default_group() -> Any:
    """torch's default process group as it is now (None before `init_process_group`)."""
    return default_group_holder().default_pg


def default_group_holder() -> Any:
    """An object whose `default_pg` is torch's default group as it is now: torch's own
    `_world` (half the cost of `GroupMember.WORLD`, which reads it), else a stand-in."""
    from torch.distributed import distributed_c10d

    world = getattr(distributed_c10d, "_world", None)
    if world is not None and isinstance(getattr(type(world), "default_pg", None), property):
        return world
    return _GroupMemberWorld()


def default_pg_field(world: Any) -> str:
    """The attribute of `world` to read the default group from: torch's `_World` keeps it in
    `_default_pg`, behind a property that costs a Python call; read the field itself when the
    property returns it."""
    try:
        if "_default_pg" in vars(world) and world._default_pg is world.default_pg:
            return "_default_pg"
    except TypeError:  # no __dict__: the property alone
        pass
    return "default_pg"


class _GroupMemberWorld:
    @property
    def default_pg(self) -> Any:
        from torch.distributed import distributed_c10d

        return distributed_c10d.GroupMember.WORLD


ERROR_CHARS = 200
_SOURCE_PREFIX = re.compile(r"^\[[^\]]*:\d+\]\s*")
"""gloo and NCCL start their messages with the C++ source location: `[.../pair.cc:553] `."""


def error_text(exc: BaseException) -> str:
    """The first sentence of an exception, without the C++ source location, at most 200 chars.

    Example: `Connection closed by peer [127.0.0.1]:43437` for gloo's error when a peer died.
    """
    text = " ".join(str(exc).split()) or type(exc).__name__
    text = _SOURCE_PREFIX.sub("", text)
    head, sep, _ = text.partition(". ")
    text = head if sep else text.rstrip(".")
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 3] + "..."
