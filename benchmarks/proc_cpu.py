"""CPU time of another process and of its threads, read from /proc without touching it.

Two clocks per process: `/proc/<pid>/stat` utime + stime (every thread the process ever had,
Ray's core-worker threads included, in clock ticks: 10 ms each) and the sum of each live
thread's `/proc/<pid>/task/<tid>/schedstat` run time (nanoseconds; a thread that ended is
missing). The tick clock is the complete one, the nanosecond clock the one fine enough for a
window of a few seconds; a benchmark reports the second and checks it against the first.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcessCpu:
    """One reading of a process's CPU seconds."""

    ticks_s: float
    """utime + stime of /proc/<pid>/stat, every thread ever (10 ms resolution)."""
    threads_s: float
    """Sum of the live threads' schedstat run times (ns resolution)."""

    def __sub__(self, other: ProcessCpu) -> ProcessCpu:
        return ProcessCpu(self.ticks_s - other.ticks_s, self.threads_s - other.threads_s)


def process_cpu(pid: int) -> ProcessCpu:
    """`pid`'s CPU seconds by both clocks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = (int(fields[11]) + int(fields[12])) * TICK_S  # utime, stime (fields 14, 15)
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            continue  # the thread ended meanwhile
    return ProcessCpu(ticks, total / 1e9)


def thread_cpu(pid: int, tid: int) -> float:
    """One thread's CPU seconds (schedstat, ns resolution); 0.0 once it has ended."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except OSError:
        return 0.0
