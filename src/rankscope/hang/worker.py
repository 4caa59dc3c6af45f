"""What each probe reports about its collectives and whereabouts, live and as last words.

The `collectives` command returns the whole ring buffer, or with `per_group` only each group's
newest records (`rankscope hang` past INLINE_RANKS ranks: at 4,096 ranks the whole 2,000-call
ring of every rank is 640 MB through the hub); the heartbeat summaries carry the
last few records (none while the level is off; the groups' rank lists go to the hub once, by
`register_groups`) and where the process is (its thread in a
collective or in user code, which need not be the main thread), so the hub still knows them
after the process died.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections import Counter
from collections.abc import Sequence
from typing import Any

from rankscope import level as _level
from rankscope.hang.model import RecorderSnapshot
from rankscope.hang.worker_flight import read_flight_recorder
from rankscope.hang.worker_recorder import collective_recorder
from rankscope.runtime.probe import register_groups, register_handler, register_summary
from rankscope.stacks.model import Frame, active_thread, headline
from rankscope.stacks.worker import capture_threads, is_stdlib

SUMMARY_RECORDS = 16
INLINE_RANKS = 256
"""A group's rank list rides along with the `collectives` reply up to this many ranks; a
bigger group's comes from the hub, which has it once (`seen_groups`): at 4,096 ranks the lists
would be 16 KB of every rank's reply, 64 MB through the hub for one `rankscope hang`."""


WINDOW_PER_GROUP = SUMMARY_RECORDS
"""The newest collectives of each group `rankscope hang` asks of every rank in a big job: the
analysis aligns the ranks at the newest sequence numbers (who waits, who never entered), and a
mismatch of ops or shapes stops a group within a call or two, so it lies among them. As many as
a heartbeat carries (a silent rank's evidence), and no more: unpickling and comparing every
rank's records is the largest part of `hang`'s own CPU (docs/PERFORMANCE.md, Scale)."""


def newest_per_group(records: tuple[Any, ...], per_group: int) -> tuple[Any, ...]:
    """The last `per_group` records of each group, in their order."""
    seen: Counter[str] = Counter()
    keep = []
    for record in reversed(records):
        if seen[record.group] < per_group:
            seen[record.group] += 1
            keep.append(record)
    return tuple(reversed(keep))


@register_handler("collectives")
def _collectives_command(args: dict[str, Any]) -> RecorderSnapshot:
    snapshot = collective_recorder().snapshot()
    flight, flight_groups = read_flight_recorder()
    if args.get("per_group"):  # torch's flight recorder too: up to 2,000 entries a rank
        per_group = int(args["per_group"])
        records = newest_per_group(snapshot.records, per_group)
        snapshot = dataclasses.replace(snapshot, records=records)
        flight = newest_per_group(tuple(flight), per_group)
    groups = {name: ranks for name, ranks in snapshot.groups.items() if len(ranks) <= INLINE_RANKS}
    return dataclasses.replace(snapshot, groups=groups, flight=flight, flight_groups=flight_groups)


@register_summary("collectives")
def last_collectives() -> RecorderSnapshot:
    """The last few records: small enough to send with every heartbeat (none at level off).
    Without the groups' rank lists: the hub keeps those once per group (`seen_groups`)."""
    snapshot = collective_recorder().snapshot(last=SUMMARY_RECORDS if _level.RECORDING else 0)
    return dataclasses.replace(snapshot, groups={})


@register_groups
def seen_groups() -> dict[str, tuple[int, ...]]:
    """The process groups this rank used (the same tuples each time), sent to the hub only
    when they change."""
    return collective_recorder().snapshot(last=0).groups


_motion = ""
"""This heartbeat's `motion`, made from the stack capture `where` took."""


@register_summary("where")
def where_headline() -> str | None:
    """Where this process is, in one line (`load_batch data.py:41`), from its busiest thread;
    None at level off (no stack capture per heartbeat; `rankscope stacks` still asks)."""
    global _motion
    if not _level.RECORDING:
        _motion = ""
        return None
    thread = active_thread(capture_threads())
    _motion = motion_of(None if thread is None else thread.frames, disk_bytes())
    return None if thread is None else headline(thread.frames)


@register_summary("motion")
def motion() -> str | None:
    """Whether this process moves, for a reader comparing two heartbeats (a rank its group
    waits for: slow, or stuck?): its active thread's call chain, and its disk I/O so far."""
    return _motion or None


def motion_of(frames: Sequence[Frame] | None, io_bytes: int) -> str:
    """`chain:io`: a hash of the functions on the stack (not their lines: a spin loop's line
    changes while it goes nowhere; nor the standard library's innermost calls: a loop polling
    a file, a queue or a socket calls in and out of them while it goes nowhere) and the bytes
    read from and written to storage."""
    frames = frames or ()
    own = next((i for i, f in enumerate(frames) if not is_stdlib(f.filename)), len(frames))
    chain = "|".join(f"{f.filename}:{f.function}" for f in frames[own:])
    return f"{zlib.crc32(chain.encode()):08x}:{io_bytes}"


def disk_bytes() -> int:
    """Bytes this process read from and wrote to storage (Linux `/proc/self/io`; 0 elsewhere):
    a checkpoint being written moves it, a lock, a sleep or a spin does not."""
    try:
        with open("/proc/self/io", "rb") as f:
            fields = dict(line.split(b":", 1) for line in f.read().splitlines() if b":" in line)
        return int(fields.get(b"read_bytes", 0)) + int(fields.get(b"write_bytes", 0))
    except (OSError, ValueError):
        return 0


@register_handler("where")
def _where_command(args: dict[str, Any]) -> str | None:
    return where_now()


def where_now() -> str | None:
    """Where this process is now, at any level. `rankscope hang` asks only this, not every
    thread's stack: at 4,096 ranks the stacks are megabytes for the CLI to unpickle."""
    thread = active_thread(capture_threads())
    return None if thread is None else headline(thread.frames)
