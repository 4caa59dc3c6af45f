"""Dataclass records as JSON-ready values, for `--json`, reports and the run directory; and
the JSON files of the run directory read back."""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping
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
    if isinstance(value, dict | Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    return value


def parse_json(data: bytes | str) -> Any:
    """A JSON document: orjson where it can (4x the standard library's speed on the 4,096 step
    files a report reads), the standard library for what orjson refuses: the NaN and Infinity
    that `json.dumps` writes by default (a rank's loss went NaN). Raises ValueError.
    orjson is imported here, not with the module: every worker imports this one for `plain`."""
    import orjson

    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)
