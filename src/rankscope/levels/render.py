"""`rankscope level` as a table: each process's level, sampling and pending switch back."""

from __future__ import annotations

import time

from rich.table import Table

from rankscope.levels.model import RankLevel

__all__ = ["render_levels"]


def render_levels(rows: list[RankLevel]) -> Table:
    table = Table(title="debug levels", title_justify="left")
    for column in ("job", "who", "pid", "level", "sample every", "until"):
        table.add_column(column)
    for r in rows:
        s = r.state
        until = ""
        if s is not None and s.until is not None:
            back = f"{s.back_to}, every {s.back_sample_every or s.sample_every}"
            until = f"{time.strftime('%H:%M:%S', time.localtime(s.until))} -> {back}"
        table.add_row(
            r.job_id,
            r.who,
            str(r.pid),
            s.level if s is not None else f"? ({r.error})",
            str(s.sample_every) if s is not None else "",
            until,
        )
    return table
