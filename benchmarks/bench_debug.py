"""A disabled `conditional_breakpoint` against a call of an empty function (goal: < 1 us, <= 5x).

    .venv/bin/python benchmarks/bench_debug.py [--calls N] [--repeats R]

Also: the cost `rankscope.step()` pays for the sync-pause check when no session is open.
"""

from __future__ import annotations

import argparse
import os
import statistics
import timeit

os.environ.pop("RANKSCOPE_DEBUG", None)
os.environ.pop("RANKSCOPE_LEVEL", None)

import rankscope
from rankscope.debug.worker_sync import wait_if_paused
from rankscope.runtime.probe import progress


def empty(condition: object = True, rank_filter: object = None) -> None:
    pass


def _per_call_ns(stmt: str, calls: int, repeats: int, namespace: dict[str, object]) -> float:
    times = timeit.repeat(stmt, globals=namespace, number=calls, repeat=repeats)
    return statistics.median(times) / calls * 1e9


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    assert not rankscope.debug.debugging_enabled()
    ns: dict[str, object] = {
        "cb": rankscope.conditional_breakpoint,
        "empty": empty,
        "cond": lambda: True,
        "tick": progress.tick,
        "step": rankscope.step,
        "wait_if_paused": wait_if_paused,
    }
    rows = [
        ("empty()", "empty()", None),
        ("conditional_breakpoint()", "cb()", "empty()"),
        ("empty(cond, rank_filter=0)", "empty(cond, rank_filter=0)", None),
        (
            "conditional_breakpoint(cond, rank_filter=0, timeout=5)",
            "cb(cond, rank_filter=0, timeout=5)",
            "empty(cond, rank_filter=0)",
        ),
        ("wait_if_paused() (the check step() adds)", "wait_if_paused()", "empty()"),
        ("progress.tick() (step without the check)", "tick()", None),
        ("rankscope.step()", "step()", "tick()"),
    ]
    measured = {stmt: _per_call_ns(stmt, args.calls, args.repeats, ns) for _, stmt, _ in rows}
    print(f"median of {args.repeats} x {args.calls:,} calls, debugging off")
    for label, stmt, baseline in rows:
        line = f"  {label:<58} {measured[stmt]:7.1f} ns/call"
        if baseline is not None:
            line += f"   {measured[stmt] / measured[baseline]:.2f}x {baseline}"
        print(line)
    disabled = measured["cb()"]
    ratio = disabled / measured["empty()"]
    verdict = "ok" if disabled < 1000 and ratio <= 5 else "MISSED"
    print(f"goal (< 1000 ns and <= 5x an empty call): {verdict} ({disabled:.0f} ns, {ratio:.1f}x)")


if __name__ == "__main__":
    main()
