"""User code the memory tests run in Ray actors: a rank that leaks, one that holds steady and
one whose memory rises and falls back every few steps (a sawtooth)."""

from __future__ import annotations

import mmap
import os

CHUNK = 2 * 1024 * 1024
SAWTOOTH_PERIOD = 6


def fresh_buffer(size: int) -> mmap.mmap:
    """Anonymous pages written through, so the kernel counts them resident at once."""
    buf = mmap.mmap(-1, size)
    buf.write(b"\x01" * size)
    return buf


class MemoryRank:
    """One rank of a job with a MemoryProfiler that snapshots once per step."""

    def __init__(self, rank: int, world_size: int, kind: str) -> None:
        import rankscope

        rankscope.init(rank=rank, world_size=world_size)
        self.kind = kind
        self.kept: list[mmap.mmap] = []
        self.profiler = rankscope.MemoryProfiler()

    def pid(self) -> int:
        return os.getpid()

    def train(self, steps: int):
        import rankscope

        for step in range(steps):
            self.one_step(step)
            self.profiler.take_snapshot(step=step)
            rankscope.step()
        return self.profiler.leak_report()

    def one_step(self, step: int) -> None:
        if self.kind == "leak":
            self.kept.append(fresh_buffer(CHUNK))  # kept forever: the leak
        elif self.kind == "steady":
            scratch = fresh_buffer(4 * CHUNK)  # used and freed within the step
            del scratch
        elif self.kind == "sawtooth":
            self.kept.append(fresh_buffer(CHUNK))
            if len(self.kept) == SAWTOOTH_PERIOD:
                self.kept.clear()  # e.g. a buffer flushed every few steps
