"""Environment facts of every rank, compared by `rankscope diagnose`."""

from rankscope.doctor.facts import EnvironmentFacts, collect_facts

__all__ = ["EnvironmentFacts", "collect_facts"]
