"""Pure functions over log lines: templates, filters, the time-ordered merge and the fold.

A template is a message with its numbers and hex masked (`loss=<n> step <n>`); the numbers are
kept, so folding lines of many ranks into one shows their spread (`loss=0.31..0.52`) instead of
hiding them as Ray's "[repeated 4x across cluster]" does.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rankscope.errors import UserError
from rankscope.logs.model import LEVEL_NUMBERS, FoldedLine, LogLine, PartialFold

__all__ = [
    "FOLD_WINDOW_S",
    "NUMBER",
    "Folder",
    "LogFilter",
    "fold_lines",
    "fold_partials",
    "fold_result",
    "merge_folds",
    "merge_lines",
    "newest_folds",
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
        return self.keeps_fields(
            line.rank, line.time, line.level, line.source, line.message, pattern
        )

    def keeps_fields(
        self,
        rank: int | None,
        time: float,
        level: str,
        source: str,
        message: str,
        pattern: re.Pattern[str] | None = None,
    ) -> bool:
        """`keeps` on a line's fields (a node folding lines builds no `LogLine` per line)."""
        if self.ranks is not None and rank not in self.ranks:
            return False
        if self.since is not None and time < self.now - self.since:
            return False
        if self.min_level is not None:
            floor = level_number(self.min_level)
            if source == "stdout" or (source in ("log", "summary") and level_number(level) < floor):
                return False
        return pattern is None or pattern.search(message) is not None

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
    return [fold_result(f) for f in fold_partials(lines, window_s)]


def fold_partials(lines: Sequence[LogLine], window_s: float = FOLD_WINDOW_S) -> list[PartialFold]:
    """`fold_lines` before the result: folds that `merge_folds` can merge with others."""
    folder = Folder(window_s)
    for line in lines:
        folder.add(line)
    return folder.partials()


class Folder:
    """Folds lines given in time order (one file's, or a merged stream) into `PartialFold`s."""

    def __init__(self, window_s: float = FOLD_WINDOW_S, limit: int | None = None) -> None:
        self.window_s = window_s
        self.limit = None if limit is None else max(1, limit)
        """Keep about the newest `limit` folds (up to twice that between trims): lines that do
        not template well make one fold each, and a node's whole history must not pile up."""
        self.dropped = 0
        """Lines of the older folds let go past `limit`."""
        self._open: dict[tuple[str, str, str], PartialFold] = {}
        self._done: list[PartialFold] = []

    def add(self, line: LogLine) -> None:
        self.add_fields(line.time, line.message, line.level, line.source, line.rank, line.pid, line)

    def add_fields(
        self,
        time: float,
        message: str,
        level: str,
        source: str,
        rank: int | None,
        pid: int,
        line: LogLine | Callable[[], LogLine],
    ) -> None:
        """One line by its fields; `line` (or a function making it) is kept only when the
        line starts a fold, so a node folding many lines builds one `LogLine` per fold."""
        template, numbers = template_of(message)
        key = (level, template, source)
        fold = self._open.get(key)
        if (
            fold is None
            or time - fold.first.time > self.window_s
            or len(fold.numbers) != len(numbers)
        ):
            if fold is not None:
                self._done.append(fold)
            first = line if isinstance(line, LogLine) else line()
            fold = PartialFold(first, template, time, set(), set(), 0, [[] for _ in numbers])
            self._open[key] = fold
            if self.limit is not None and len(self._done) + len(self._open) > 2 * self.limit:
                self._trim(self.limit)
        fold.count += 1
        if time > fold.last_time:
            fold.last_time = time
        if rank is not None:
            fold.ranks.add(rank)
        else:
            fold.pids.add(pid)
        for slot, text in zip(fold.numbers, numbers, strict=False):
            try:  # inline, not `_value`: once per number of every line folded
                value = float(text)
            except ValueError:
                value = 0.0
            if not slot:
                slot.extend((value, text, value, text))
            elif value < slot[0]:
                slot[0], slot[1] = value, text
            elif value > slot[2]:
                slot[2], slot[3] = value, text

    def _trim(self, limit: int) -> None:
        kept, dropped = newest_folds(self._done + list(self._open.values()), limit)
        self.dropped += dropped
        ids = {id(f) for f in kept}
        self._done = [f for f in self._done if id(f) in ids]
        self._open = {k: f for k, f in self._open.items() if id(f) in ids}

    def partials(self) -> list[PartialFold]:
        """Every fold so far, in order of their first line."""
        done = self._done + list(self._open.values())
        done.sort(key=_first_order)
        return done


def _first_order(fold: PartialFold) -> tuple[float, int, int]:
    return (fold.first.time, fold.first.pid, fold.first.seq)


def newest_folds(folds: list[PartialFold], keep: int) -> tuple[list[PartialFold], int]:
    """The newest `keep` folds (by first line) and how many lines the others held, so a
    folded read stays bounded and still says how much it left out."""
    if len(folds) <= keep:
        return folds, 0
    folds = sorted(folds, key=_first_order)
    cut = len(folds) - keep
    return folds[cut:], sum(f.count for f in folds[:cut])


def merge_folds(
    streams: Iterable[Sequence[PartialFold]], window_s: float = FOLD_WINDOW_S
) -> list[FoldedLine]:
    """Partial folds of many files and nodes as one fold list: a partial fold whose first line
    is within `window_s` of an open fold of its key joins it (so a fold spans up to twice the
    window when its lines were folded apart), in order of first lines."""
    folds = sorted((f for s in streams for f in s), key=_first_order)
    open_folds: dict[tuple[str, str, str], PartialFold] = {}
    done: list[PartialFold] = []
    for fold in folds:
        key = (fold.first.level, fold.template, fold.first.source)
        into = open_folds.get(key)
        if (
            into is None
            or fold.first.time - into.first.time > window_s
            or len(into.numbers) != len(fold.numbers)
        ):
            if into is not None:
                done.append(into)
            open_folds[key] = _copy(fold)
            continue
        into.count += fold.count
        into.last_time = max(into.last_time, fold.last_time)
        into.ranks |= fold.ranks
        into.pids |= fold.pids
        for slot, other in zip(into.numbers, fold.numbers, strict=True):
            if not other:
                continue
            if not slot:
                slot.extend(other)
                continue
            if other[0] < slot[0]:
                slot[0], slot[1] = other[0], other[1]
            if other[2] > slot[2]:
                slot[2], slot[3] = other[2], other[3]
    done.extend(open_folds.values())
    done.sort(key=_first_order)
    return [fold_result(f) for f in done]


def _copy(fold: PartialFold) -> PartialFold:
    return PartialFold(
        fold.first,
        fold.template,
        fold.last_time,
        set(fold.ranks),
        set(fold.pids),
        fold.count,
        [list(slot) for slot in fold.numbers],
    )


def fold_result(fold: PartialFold) -> FoldedLine:
    first = fold.first
    spreads = [_spread(slot) for slot in fold.numbers]
    return FoldedLine(
        time=first.time,
        last_time=fold.last_time,
        level=first.level,
        text=spread_text(fold.template, spreads) if fold.count > 1 else first.message,
        template=fold.template,
        ranks=tuple(sorted(fold.ranks)),
        pids=tuple(sorted(fold.pids)),
        count=fold.count,
        source=first.source,
        exc=first.exc,
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
