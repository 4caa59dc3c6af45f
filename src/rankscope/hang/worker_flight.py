"""PyTorch's own flight recorder, read on demand and merged with rankscope's recorder.

When a job sets TORCH_FR_BUFFER_SIZE (gloo and other CPU backends) or
TORCH_NCCL_TRACE_BUFFER_SIZE (NCCL, whose entries move to "completed" when their CUDA event
fires), torch keeps a ring of every collective it ran. It sees what rankscope's recorder cannot:
calls that never pass through torch.distributed's Python functions (FSDP2, DTensor, C++
callers) and calls made before rankscope attached. The `collectives` probe command adds its
entries only when the job turned it on: reading it costs nothing otherwise.

The two rings live in different C++ objects: `_dump_nccl_trace_json` exists only in NCCL builds,
`_dump_fr_trace_json` holds the other backends' entries; both are read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rankscope.hang.model import CallState, CollectiveRecord

__all__ = [
    "FLIGHT_SOURCE",
    "flight_groups",
    "flight_recorder_enabled",
    "merge_flight",
    "parse_flight_dump",
    "read_flight_recorder",
]

ENV_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
DUMPS = ("_dump_nccl_trace_json", "_dump_fr_trace_json")
FLIGHT_SOURCE = "torch flight recorder"
MAX_ENTRIES = 2000
"""Entries sent per dump (the newest): torch's own ring is usually 2,000 to 20,000 long."""

_DTYPES = {
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Long": "int64",
    "Int": "int32",
    "Short": "int16",
    "Char": "int8",
    "Byte": "uint8",
    "Bool": "bool",
}


def flight_recorder_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the job asked torch to keep a flight recorder (a buffer size above zero)."""
    for name in ENV_VARS:
        try:
            if int(environ.get(name, "0")) > 0:
                return True
        except ValueError:
            continue
    return False


FlightDump = tuple[tuple[CollectiveRecord, ...], dict[str, tuple[int, ...]]]


def read_flight_recorder() -> FlightDump:
    """This process's flight recorder entries and the groups' ranks it knows; empty when the
    recorder is off or torch cannot say."""
    if not flight_recorder_enabled():
        return (), {}
    try:
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            return (), {}
        import torch._C._distributed_c10d as c10d
    except Exception:
        return (), {}
    records: list[CollectiveRecord] = []
    groups: dict[str, tuple[int, ...]] = {}
    for name in DUMPS:
        dump = getattr(c10d, name, None)
        if dump is None:
            continue
        try:
            parsed = json.loads(dump(True, False))
            records.extend(parse_flight_dump(parsed))
            groups.update(flight_groups(parsed))
        except Exception:
            continue  # a torch that changed the dump's shape: rankscope's own records remain
    records.sort(key=lambda r: r.start)
    return tuple(records[-MAX_ENTRIES:]), groups


def parse_flight_dump(dump: Mapping[str, Any]) -> list[CollectiveRecord]:
    """Flight recorder entries as collective records (torch's JSON dump, version 2.x)."""
    return [_record(entry) for entry in dump.get("entries") or () if isinstance(entry, dict)]


def flight_groups(dump: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Group name -> global ranks from the dump's `pg_config` (NCCL fills it; gloo does not)."""
    groups = {}
    for name, config in (dump.get("pg_config") or {}).items():
        try:
            ranks = tuple(int(r) for r in json.loads(config.get("ranks") or "[]"))
        except (AttributeError, TypeError, ValueError):
            continue
        if name and ranks:
            groups[str(name)] = ranks
    return groups


def _record(entry: Mapping[str, Any]) -> CollectiveRecord:
    group = entry.get("process_group") or ["?"]
    started = int(entry.get("time_created_ns") or 0) / 1e9
    completed_ns = int(entry.get("time_discovered_completed_ns") or 0)
    # NCCL's entries say "completed" once their CUDA event fired; other backends' entries
    # stay "scheduled" and retire when their work finishes.
    done = entry.get("state") == "completed" or bool(entry.get("retired"))
    end = (completed_ns / 1e9 if completed_ns else started) if done else None
    p2p = bool(entry.get("is_p2p"))
    seq = entry.get("p2p_seq_id" if p2p else "collective_seq_id")
    return CollectiveRecord(
        group=str(group[0]),
        seq=int(seq or 0),
        op=str(entry.get("profiling_name") or "?").split(":", 1)[-1],
        shapes=tuple(tuple(int(d) for d in s) for s in entry.get("input_sizes") or ()),
        dtypes=tuple(_DTYPES.get(d, str(d).lower()) for d in entry.get("input_dtypes") or ()),
        start=started,
        end=end,
        state=CallState.COMPLETED if done else CallState.STARTED,
        caller=FLIGHT_SOURCE,
        p2p=p2p,
        source=FLIGHT_SOURCE,
    )


def merge_flight(
    records: Sequence[CollectiveRecord], flight: Iterable[CollectiveRecord]
) -> tuple[CollectiveRecord, ...]:
    """rankscope's records, plus the flight recorder's calls they lack (by group and seq).

    rankscope's records win where both saw a call: they name the caller's file:line and, for
    NCCL, complete on the device too.
    """
    flight = tuple(flight)
    if not flight:  # the common case: no flight recorder (gloo, or NCCL without its buffer)
        return tuple(records)
    seen = {(r.group, r.p2p, r.seq) for r in records}
    extra = [r for r in flight if (r.group, r.p2p, r.seq) not in seen]
    if not extra:
        return tuple(records)
    return tuple(sorted([*records, *extra], key=lambda r: r.start))
