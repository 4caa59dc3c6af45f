"""`rankscope logs` as text: one line per fold (or per line with `--raw`), rank first."""

from __future__ import annotations

import time

from rich.text import Text

from rankscope.logs.model import FoldedLine, JobLogs, LogLine

__all__ = ["fold_text", "line_text", "render_logs"]

_STYLES = {"ERROR": "red", "CRITICAL": "bold red", "WARNING": "yellow", "DEBUG": "dim"}


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t * 1000) % 1000:03d}"


def _level(level: str, source: str) -> str:
    return level if source in ("log", "summary") else source


def fold_text(fold: FoldedLine) -> str:
    """`12:00:01.250 WARNING ranks 0-3: loss=0.31..0.52 (x4)`."""
    count = f" (x{fold.count})" if fold.count > 1 else ""
    head = (
        f"{_clock(fold.time)} {_level(fold.level, fold.source):<7} {fold.who}: {fold.text}{count}"
    )
    return head + ("\n" + fold.exc if fold.exc else "")


def line_text(line: LogLine) -> str:
    """`12:00:01.250 INFO    rank 2: loss=0.310`."""
    head = f"{_clock(line.time)} {_level(line.level, line.source):<7} {line.label}: {line.message}"
    return head + ("\n" + line.exc if line.exc else "")


def render_logs(result: JobLogs) -> list[Text]:
    """The job's lines, a header and a footer saying what was read and what was left out."""
    count = len(result.lines) or sum(f.count for f in result.folds)
    texts = [Text(f"job {result.job_id}: {count} lines from {result.files} files", style="bold")]
    texts.extend(Text(f"note: {n}", style="yellow") for n in result.notes)
    if result.lines:
        for line in result.lines:
            texts.append(Text(line_text(line), style=_STYLES.get(line.level, "")))
    else:
        for fold in result.folds:
            texts.append(Text(fold_text(fold), style=_STYLES.get(fold.level, "")))
    if result.skipped:
        texts.append(Text(f"({result.skipped} older lines left out; narrow with --since)"))
    texts.extend(Text(f"warning: {e}", style="yellow") for e in result.errors)
    return texts
