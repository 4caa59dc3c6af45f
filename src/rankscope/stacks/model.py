"""Stack records shared by the probe (capture), py-spy (fallback) and the analysis."""

from __future__ import annotations

import os
from dataclasses import dataclass

from rankscope.runtime.protocol import ProbeStatus


@dataclass(frozen=True)
class Frame:
    function: str
    filename: str
    lineno: int
    library: bool
    """True for the standard library, site-packages, Ray and rankscope's own machinery."""

    @property
    def location(self) -> str:
        return f"{os.path.basename(self.filename)}:{self.lineno}"


@dataclass(frozen=True)
class ThreadStack:
    thread_name: str
    thread_id: int
    is_main: bool
    frames: tuple[Frame, ...]
    """Innermost call first, as py-spy and `rankscope stacks` print them."""


@dataclass(frozen=True)
class ProcessStacks:
    """Every thread of one registered process, or why they could not be taken."""

    status: ProbeStatus
    threads: tuple[ThreadStack, ...]
    source: str
    """`probe` (answered itself), `py-spy` (taken from outside), or `none` (both failed)."""
    error: str = ""
