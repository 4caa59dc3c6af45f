"""Where an idle rank's CPU goes, thread by thread, with the probe and without (issue 33).

Two idle Ray actors on a local cluster, one with `rankscope.init`, one without; over a window
the driver reads each OS thread's run time from /proc/<pid>/task/<tid>/schedstat (ns) and names
it (the Python thread's name, else the OS name Ray gives its C++ threads: `client.poll0`,
`worker.io`, `task_event_buff`, ...). py-spy sees only Python threads, and with `--native` it
must stop the process to unwind (its ptrace stops multiply the CPU it measures); this reads the
threads' clocks, Ray's included, without touching them.

Run: .venv/bin/python benchmarks/profile_idle_rank.py [--seconds 30]
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import sys
import tempfile
import threading
import time

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_TMPDIR", tempfile.mkdtemp(prefix="rs-idle-", dir="/tmp"))


def thread_clocks(pid: int) -> dict[tuple[int, str], int]:
    """(tid, OS name) -> run time in ns, of every live thread of `pid`."""
    found = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                found[(int(tid), name)] = int(f.read().split()[0])
        except OSError:
            continue  # ended meanwhile
    return found


class IdleRank:
    """A Ray actor that does nothing, with or without the probe."""

    def __init__(self, probe: bool) -> None:
        import torch  # noqa: F401  (a rank has torch loaded)

        if probe:
            import rankscope

            rankscope.init(rank=0, world_size=1, group="idle")

    def threads(self) -> tuple[int, dict[int, str]]:
        return os.getpid(), {t.native_id or 0: t.name for t in threading.enumerate()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()

    import ray

    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    cls = ray.remote(num_cpus=0)(IdleRank)
    ranks = {"light": cls.remote(True), "no probe": cls.remote(False)}
    named = {label: ray.get(rank.threads.remote()) for label, rank in ranks.items()}
    time.sleep(10)  # past the probe's start
    before = {label: thread_clocks(pid) for label, (pid, _) in named.items()}
    time.sleep(args.seconds)
    after = {label: thread_clocks(pid) for label, (pid, _) in named.items()}
    for label, (_, python_names) in named.items():
        spent: collections.Counter[str] = collections.Counter()
        for (tid, name), ns in after[label].items():
            spent[python_names.get(tid, name)] += ns - before[label].get((tid, name), 0)
        print(f"{label}: {sum(spent.values()) / args.seconds / 1e6:.2f} ms of CPU per second")
        for name, ns in spent.most_common(10):
            print(f"  {ns / args.seconds / 1e6:7.3f} ms/s  {name}")
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
