"""The records of the logs feature: lines as they are on disk, folds as `rankscope logs` shows
them, and the per-template summary each probe sends with its heartbeat."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["FoldedLine", "JobLogs", "LogLine", "NodeLogs", "PartialFold", "TemplateStat"]

LEVEL_NUMBERS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}
"""The stdlib's level numbers by name; stdout/stderr lines of Ray's files have no level."""


@dataclass(slots=True)
class LogLine:
    """One record from a rank's JSON Lines file, or one line of Ray's worker .out/.err."""

    time: float
    """Seconds since the epoch; for .out/.err lines (no timestamps) the file's last write."""
    message: str
    level: str = "INFO"
    rank: int | None = None
    pid: int = 0
    node: str = ""
    """The hostname of the node the line was written on."""
    role: str | None = None
    """The actor class (verl's role) of the process, when it is an actor."""
    group: str | None = None
    logger: str = ""
    step: int = 0
    exc: str = ""
    """The formatted exception of `log.exception(...)`, else empty."""
    extra: dict[str, Any] = field(default_factory=dict)
    source: str = "log"
    """`log` (rankscope's JSONL file), `stdout` or `stderr` (Ray's worker files), or `summary`
    (a template of the hub's last log summary of a rank whose node is gone: `logs.gone`)."""
    seq: int = 0
    """Where the line starts in its file (bytes), so lines of the same time keep their order."""

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}@{self.node}"

    def __reduce__(self) -> tuple[type[LogLine], tuple[Any, ...]]:
        """Pickled as its fields in order: a node's lines reach the CLI 5x faster than through
        the dataclass's default state dict."""
        return (LogLine, _LINE_FIELDS(self))


_LINE_FIELDS = operator.attrgetter(*(f.name for f in fields(LogLine)))


@dataclass(frozen=True)
class FoldedLine:
    """Lines of one template from one or several ranks, folded: `ranks 0-3: loss=0.31..0.52`."""

    time: float
    """The first line's time."""
    last_time: float
    level: str
    text: str
    """The message with each number as its spread across the folded lines (`0.31..0.52`)."""
    template: str
    ranks: tuple[int, ...]
    pids: tuple[int, ...]
    """Processes without a rank, by pid."""
    count: int
    source: str = "log"
    exc: str = ""
    """The first folded line's exception text, if any."""

    @property
    def who(self) -> str:
        from rankscope.ranks import format_ranks

        parts = []
        if self.ranks:
            word = "rank" if len(self.ranks) == 1 else "ranks"
            parts.append(f"{word} {format_ranks(self.ranks)}")
        if self.pids:
            parts.append("pid " + ",".join(str(p) for p in self.pids))
        return " + ".join(parts) or "?"


@dataclass(slots=True)
class PartialFold:
    """A fold being built where the lines are (per file, on their node), mergeable with the
    folds of other files and nodes (`analysis.merge_folds`): `rankscope logs` sends these to
    the CLI instead of every line."""

    first: LogLine
    template: str
    last_time: float
    ranks: set[int]
    pids: set[int]
    count: int
    numbers: list[list[Any]]
    """Per number slot: [low value, its text, high value, its text] (empty before a line)."""


@dataclass(frozen=True)
class TemplateStat:
    """One (level, template)'s count in a process, with each number slot's min/max/last."""

    level: str
    template: str
    count: int
    first_time: float
    last_time: float
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()
    last: tuple[float, ...] = ()


@dataclass(frozen=True)
class NodeLogs:
    """What a task on one node read: the lines kept, and what it could not read."""

    hostname: str
    lines: tuple[LogLine, ...]
    files: tuple[str, ...]
    skipped: int = 0
    """Lines left out because more than the bound matched (the oldest go first)."""
    errors: tuple[str, ...] = ()
    offsets: dict[str, int] = field(default_factory=dict)
    """Each file read (by device and inode) -> the bytes read up to (`--follow` reads on)."""
    folds: tuple[PartialFold, ...] = ()
    """Read with `fold=True`: the lines folded per file instead of `lines`."""


@dataclass(frozen=True)
class JobLogs:
    """What `rankscope logs` shows for one job: folded lines, or every line with `--raw`."""

    job_id: str
    folds: tuple[FoldedLine, ...]
    lines: tuple[LogLine, ...]
    files: int
    skipped: int
    """Lines left out on some node because more than the bound matched (the oldest)."""
    errors: tuple[str, ...]
    notes: tuple[str, ...] = ()
    """One per node that is gone: its ranks' lines come from the hub's last log summaries."""
