"""The `--json` envelope every command prints: the same dataclasses the tables come from.

What a command prints is a model: a dataclass, or a list or tuple of them (`Model`); never a
dict put together in the command. A model whose JSON is keyed by job (`status`, `diagnose`)
says so itself with a `json_data()` method (see `serialize.by_job`).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from rankscope.serialize import plain

__all__ = ["SCHEMA_VERSION", "is_model", "to_json"]

SCHEMA_VERSION = 1


def is_model(data: Any) -> bool:
    """A dataclass instance, or a list or tuple of them (empty included)."""
    if isinstance(data, list | tuple):
        return all(is_model(item) for item in data)
    return dataclasses.is_dataclass(data) and not isinstance(data, type)


def to_json(command: str, data: Any) -> str:
    """`{"schema_version": 1, "command": ..., "data": ...}` from a model (`is_model`); a
    model's `json_data()`, when it has one, shapes its data."""
    if not is_model(data):
        raise TypeError(f"--json of {command}: {type(data).__name__} is not a model dataclass")
    json_data = getattr(data, "json_data", None)
    return json.dumps(
        {
            "schema_version": SCHEMA_VERSION,
            "command": command,
            "data": json_data() if callable(json_data) else plain(data),
        },
        indent=2,
    )
