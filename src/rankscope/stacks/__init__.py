"""Where is every rank right now: stacks of every thread of every registered process."""

from rankscope.stacks.capture import capture_threads
from rankscope.stacks.model import Frame, ProcessStacks, ThreadStack

__all__ = ["Frame", "ProcessStacks", "ThreadStack", "capture_threads"]
