"""The `--json` envelope every command prints: the same dataclasses the tables come from."""

from __future__ import annotations

import json
from typing import Any

from rankscope.serialize import plain

__all__ = ["SCHEMA_VERSION", "to_json"]

SCHEMA_VERSION = 1


def to_json(command: str, data: Any) -> str:
    """`{"schema_version": 1, "command": ..., "data": ...}` from dataclasses and enums."""
    return json.dumps(
        {"schema_version": SCHEMA_VERSION, "command": command, "data": plain(data)},
        indent=2,
    )
