"""Training health monitors: stragglers, throughput drift, loss, non-finite values, memory and
collective latency, from what `rankscope.step()` records on every rank.
"""

from rankscope.monitor.straggler import StragglerScore, straggler_scores

__all__ = ["StragglerScore", "straggler_scores"]
