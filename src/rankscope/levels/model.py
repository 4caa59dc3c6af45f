"""What `rankscope level` reports: each process's debug level after the command."""

from __future__ import annotations

from dataclasses import dataclass

from rankscope.level import LevelState

__all__ = ["RankLevel"]


@dataclass(frozen=True)
class RankLevel:
    """One process's level after the command, or why it did not answer."""

    job_id: str
    who: str
    rank: int | None
    pid: int
    state: LevelState | None
    error: str = ""
