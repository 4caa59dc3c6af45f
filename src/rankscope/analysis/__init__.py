"""Pure functions over plain records: no Ray, no I/O, fast to test with synthetic data."""

from rankscope.analysis.ranks import format_ranks, parse_rank_spec
from rankscope.analysis.stacks import StackGroup, StackReport, group_stacks

__all__ = ["StackGroup", "StackReport", "format_ranks", "group_stacks", "parse_rank_spec"]
