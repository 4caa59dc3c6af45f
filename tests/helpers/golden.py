"""Golden-text checks: a render as a 100-column terminal without color shows it, compared
with a checked-in file, so a change in what the user reads shows as a diff.

`RANKSCOPE_UPDATE_GOLDEN=1 pytest tests/<feature>` rewrites the files of the tests it runs;
read the diff (`git diff tests/*/golden`) before committing it.
"""

from __future__ import annotations

import difflib
import os
from io import StringIO
from pathlib import Path

from rich.console import Console, RenderableType

WIDTH = 100
"""Columns of the terminal every golden render is drawn on."""
UPDATE_ENV = "RANKSCOPE_UPDATE_GOLDEN"


def render_text(renderable: RenderableType, width: int = WIDTH) -> str:
    """What `rich` prints for `renderable` on a `width`-column terminal with no color, less the
    spaces at line ends (invisible, and editors strip them from the golden files)."""
    out = StringIO()
    console = Console(
        file=out, width=width, color_system=None, force_terminal=False, legacy_windows=False
    )
    console.print(renderable)
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())


def assert_golden(text: str, golden: Path) -> None:
    """`text` is the golden file's, or the file is rewritten when RANKSCOPE_UPDATE_GOLDEN=1."""
    if os.environ.get(UPDATE_ENV) == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
        return
    if not golden.exists():
        raise AssertionError(f"{golden} is missing: {UPDATE_ENV}=1 writes it from this render")
    expected = golden.read_text()
    if text.splitlines() != expected.splitlines():
        diff = difflib.unified_diff(
            expected.splitlines(), text.splitlines(), str(golden), "this render", lineterm=""
        )
        raise AssertionError(
            "\n".join(diff) + f"\n\nthe render differs from {golden.name}; if the change is "
            f"meant, rerun with {UPDATE_ENV}=1 and commit the new file"
        )
