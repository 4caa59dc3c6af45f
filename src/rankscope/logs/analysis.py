"""Pure functions over log lines: templates, filters, the time-ordered merge and the fold.

A template is a message with its numbers and hex masked (`loss=<n> step <n>`); the numbers are
kept, so folding lines of many ranks into one shows their spread (`loss=0.31..0.52`) instead of
hiding them as Ray's "[repeated 4x across cluster]" does.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rankscope.errors import UserError
from rankscope.logs.model import LEVEL_NUMBERS, FoldedLine, LogLine

__all__ = [
    "FOLD_WINDOW_S",
    "NUMBER",
    "LogFilter",
    "fold_lines",
    "merge_lines",
    "parse_duration",
    "spread_text",
    "template_of",
]

NUMBER = "<n>"
HEX = "<hex>"
FOLD_WINDOW_S = 5.0
"""Lines of one template fold together when they fall within this many seconds of the first."""
_TOKEN = re.compile(
    r"(?P<hex>\b0x[0-9a-fA-F]+\b|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{8,}\b)"
    r"|(?P<num>(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def template_of(message: str) -> tuple[str, tuple[str, ...]]:
    """The message with numbers and hex masked, and the numbers' text in order.

    Example: `template_of("loss=0.31 at 0x7f3a")` is `("loss=<n> at <hex>", ("0.31",))`.
    """
    parts = _TOKEN.split(message)  # text, hex, number, text, hex, number, ..., text
    if len(parts) == 1:
        return message, ()
    out = [parts[0]]
    numbers = []
    for i in range(1, len(parts), 3):
        number = parts[i + 1]
        if number is None:
            out.append(HEX)
        else:
            out.append(NUMBER)
            numbers.append(number)
        out.append(parts[i + 2])
    return "".join(out), tuple(numbers)


def parse_duration(raw: str, *, what: str = "duration") -> float:
    """`"10m"` -> 600.0 (units ms, s, m/min, h, d; bare numbers are seconds)."""
    match = _DURATION.match(raw)
    if match is None or float(match.group(1)) <= 0:
        raise UserError(f"{what} {raw!r} is not a duration; use e.g. 30s, 10m, 2h")
    return float(match.group(1)) * _UNITS[match.group(2)]


def level_number(name: str) -> int:
    return LEVEL_NUMBERS.get(name.upper(), 20)


@dataclass(frozen=True)
class LogFilter:
    """Which lines `rankscope logs` keeps; validates itself (a bad value is a `UserError`).

    Example: `LogFilter(min_level="WARNING", grep=r"loss", since=600.0, now=time.time())`.
    """

    ranks: frozenset[int] | None = None
    min_level: str | None = None
    grep: str | None = None
    since: float | None = None
    """Seconds back from `now`."""
    now: float = 0.0

    def __post_init__(self) -> None:
        if self.min_level is not None and self.min_level.upper() not in LEVEL_NUMBERS:
            raise UserError(f"--level {self.min_level!r} is not one of {', '.join(LEVEL_NUMBERS)}")
        if self.grep is not None:
            try:
                re.compile(self.grep)
            except re.error as exc:
                raise UserError(
                    f"--grep {self.grep!r} is not a regular expression: {exc}"
                ) from None

    @property
    def cutoff(self) -> float | None:
        return None if self.since is None else self.now - self.since

    def keeps(self, line: LogLine, pattern: re.Pattern[str] | None = None) -> bool:
        """True when the line passes every filter; lines without a level pass `--level`
        only when they come from stderr (tracebacks and warnings land there)."""
        if self.ranks is not None and line.rank not in self.ranks:
            return False
        cutoff = self.cutoff
        if cutoff is not None and line.time < cutoff:
            return False
        if self.min_level is not None:
            floor = level_number(self.min_level)
            if line.source == "stdout" or (
                line.source in ("log", "summary") and level_number(line.level) < floor
            ):
                return False
        return pattern is None or pattern.search(line.message) is not None

    def pattern(self) -> re.Pattern[str] | None:
        return None if self.grep is None else re.compile(self.grep)


def merge_lines(streams: Iterable[Sequence[LogLine]]) -> list[LogLine]:
    """Lines from many files in one time order (ties: by process, then order in the file)."""
    keyed = [sorted(s, key=_order) for s in streams]
    return list(heapq.merge(*keyed, key=_order))


def _order(line: LogLine) -> tuple[float, int, int]:
    return (line.time, line.pid, line.seq)


def fold_lines(lines: Sequence[LogLine], window_s: float = FOLD_WINDOW_S) -> list[FoldedLine]:
    """Lines of one (level, template, source) within `window_s` of the first fold into one,
    with the ranks that logged them and each number's spread; `lines` in time order."""
    open_folds: dict[tuple[str, str, str], _Fold] = {}
    done: list[_Fold] = []
    for line in lines:
        template, numbers = template_of(line.message)
        key = (line.level, template, line.source)
        fold = open_folds.get(key)
        if (
            fold is None
            or line.time - fold.first.time > window_s
            or len(fold.numbers) != len(numbers)
        ):
            if fold is not None:
                done.append(fold)
            fold = open_folds[key] = _Fold(line, template, len(numbers))
        fold.add(line, numbers)
    done.extend(open_folds.values())
    done.sort(key=lambda f: (f.first.time, f.first.pid, f.first.seq))
    return [f.result() for f in done]


class _Fold:
    def __init__(self, first: LogLine, template: str, slots: int) -> None:
        self.first = first
        self.template = template
        self.last_time = first.time
        self.ranks: set[int] = set()
        self.pids: set[int] = set()
        self.count = 0
        self.numbers: list[list[Any]] = [[] for _ in range(slots)]
        """Per number slot: [low value, its text, high value, its text]."""

    def add(self, line: LogLine, numbers: tuple[str, ...]) -> None:
        self.count += 1
        if line.time > self.last_time:
            self.last_time = line.time
        if line.rank is not None:
            self.ranks.add(line.rank)
        else:
            self.pids.add(line.pid)
        for slot, text in zip(self.numbers, numbers, strict=False):
            value = _value(text)
            if not slot:
                slot.extend((value, text, value, text))
            elif value < slot[0]:
                slot[0], slot[1] = value, text
            elif value > slot[2]:
                slot[2], slot[3] = value, text

    def result(self) -> FoldedLine:
        spreads = [_spread(slot) for slot in self.numbers]
        return FoldedLine(
            time=self.first.time,
            last_time=self.last_time,
            level=self.first.level,
            text=spread_text(self.template, spreads) if self.count > 1 else self.first.message,
            template=self.template,
            ranks=tuple(sorted(self.ranks)),
            pids=tuple(sorted(self.pids)),
            count=self.count,
            source=self.first.source,
            exc=self.first.exc,
        )


def _value(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0


def _spread(slot: list[Any]) -> str:
    if not slot:
        return NUMBER
    low, low_text, high, high_text = slot
    return low_text if low == high else f"{low_text}..{high_text}"


def spread_text(template: str, spreads: Sequence[str]) -> str:
    """The template with each `<n>` replaced by its spread, in order."""
    parts = template.split(NUMBER)
    out = [parts[0]]
    for i, part in enumerate(parts[1:]):
        out.append(spreads[i] if i < len(spreads) else NUMBER)
        out.append(part)
    return "".join(out)
