"""Dataclass records as JSON-ready values, for `--json`, reports and the run directory."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any


def plain(value: Any) -> Any:
    """Dataclasses, enums and containers as JSON-ready values (properties `label`, `location`
    and `ok` included)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        for name in ("label", "location", "ok", "signature"):
            if hasattr(type(value), name):
                fields[name] = getattr(value, name)
        return fields
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    return value
