"""Environment facts of every rank, compared by `rankscope diagnose`."""

from rankscope.doctor.facts import collect_facts
from rankscope.doctor.model import EnvironmentFacts, EnvironmentFinding, ProcessFacts

__all__ = ["EnvironmentFacts", "EnvironmentFinding", "ProcessFacts", "collect_facts"]
