"""The demo's records: a fault (what it injects, how the driver finds it) and one run's outcome.

`Outcome` crosses processes: `--fault all` runs each fault in a child driver, which prints it
as JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rankscope.demo.session import DemoSession


@dataclass(frozen=True)
class Fault:
    """One fault: what it injects into a rank, what finds it, and the steps it needs."""

    name: str
    description: str
    diagnose: Callable[[DemoSession], bool]
    inject: Callable[[Any, int], None] | None = None
    """Called as inject(worker, step) in the faulty rank; None for faults built into train.py."""
    command: str = ""
    """What finds it, as a user would run it (`rankscope hang`): `--fault all` shows it."""
    at_step: int = 5
    """The step the fault starts at (a shorter run: its last step). A loss spike needs 10
    steps of history before it for the detector's window."""
    min_steps: int = 3
    """Fewer steps than this: the run cannot show the fault (`--steps` is refused)."""


@dataclass(frozen=True)
class Outcome:
    """What one fault's run came to: found or not, how fast, the verdict, the report."""

    fault: str
    found: bool
    seconds: float
    """From the start of training to the diagnosis' answer."""
    verdict: str
    report: str
