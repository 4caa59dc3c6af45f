"""`rankscope level`: the debug level of live ranks, shown or switched through their probes.

The level itself is owned by `rankscope.level`; this package is its command.
"""

from rankscope.levels import worker  # noqa: F401  (registers the probe's `level` command)
from rankscope.levels.model import RankLevel

__all__ = ["RankLevel"]
