"""Dataclass records as JSON-ready values, for `--json`, reports and the run directory; and
the JSON files of the run directory read back."""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
from collections.abc import Mapping
from typing import Any

PROPERTIES = ("label", "location", "ok", "signature", "matches")
"""Properties of a record that its JSON carries as if they were fields (`ok` of a report,
`matches` of a checkpoint diff)."""


def plain(value: Any) -> Any:
    """Dataclasses, enums and containers as JSON-ready values (the properties named in
    `PROPERTIES` included, fields whose metadata says `{"json": False}` left out)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names, properties = _json_names(type(value))
        fields = {name: plain(getattr(value, name)) for name in names}
        for name in properties:
            fields[name] = getattr(value, name)
        return fields
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict | Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    return value


@functools.cache
def _json_names(kind: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A record type's fields that its JSON carries (all but those whose metadata says
    `{"json": False}`), and the `PROPERTIES` it has."""
    names = tuple(f.name for f in dataclasses.fields(kind) if f.metadata.get("json", True))
    return names, tuple(name for name in PROPERTIES if hasattr(kind, name))


def by_job(records: Any) -> dict[str, Any]:
    """Records that each have a `job_id`, as JSON keyed by it: `{job_id: {other fields}}`."""
    out = {}
    for record in records:
        fields = plain(record)
        out[fields.pop("job_id")] = fields
    return out


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
