"""`rankscope status` at 4,096 ranks (issue 20): the folded table against a row per process
(what status printed before, and prints with --all), and the hub's node sweep (one read of
Ray's node table, `runtime.liveness.dead_nodes`, every 3 s).

The table: 4,096 synthetic ranks at step 120-121 with one dead, one unresponsive, one stuck and
one far behind, rendered by the real `render_status` to a 120-column console (medians of
`--trials`). The node sweep: `dead_nodes()` timed on a local Ray cluster (`--no-ray` skips it).

Run: .venv/bin/python benchmarks/bench_status.py [--ranks N] [--trials N] [--no-ray]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

NOW = 1_700_000_000.0


def synthetic_job(ranks: int) -> list[object]:
    from rankscope.context import RankContext
    from rankscope.runtime.protocol import ProbeInfo, ProbeState, ProbeStatus, Progress

    odd = {7: ProbeState.DEAD, ranks // 4: ProbeState.UNRESPONSIVE}
    out: list[object] = []
    for rank in range(ranks):
        node = rank // 8
        ctx = RankContext(
            rank, rank % 8, ranks, f"n{node}", f"10.0.{node // 256}.{node % 256}", f"h{node}",
            1000 + rank, "job", None, "RayTrainWorker", None, "env", "10.0.0.1:29500",
        )  # fmt: skip
        state = odd.get(rank, ProbeState.ALIVE)
        step, stepped = 120 + rank % 2, NOW - 0.5
        if rank == ranks // 2:
            step, stepped = 90, NOW - 45  # stuck
        elif rank == 3 * ranks // 4:
            step = 50  # far behind, still stepping
        info = ProbeInfo(f"p{rank}", ctx, "0", NOW - 900)
        seen = NOW - (0.3 if state == ProbeState.ALIVE else 40)
        out.append(ProbeStatus(info, state, NOW - 900, seen, Progress(step, stepped), 0, 0))
    return out


def render_seconds(probes: list[object], show_all: bool) -> tuple[float, int]:
    from rich.console import Console

    from rankscope.status.render import render_status

    with open(os.devnull, "w") as sink:
        console = Console(width=120, file=sink, record=True)
        start = time.perf_counter()
        console.print(render_status("job", probes, now=NOW, show_all=show_all))  # type: ignore[arg-type]
        took = time.perf_counter() - start
        return took, len(console.export_text().splitlines())


def node_sweep_seconds(calls: int) -> float:
    import ray

    from rankscope.runtime.liveness import dead_nodes

    ray.init(
        address="local",
        num_cpus=1,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
    )
    try:
        dead_nodes()
        start = time.perf_counter()
        for _ in range(calls):
            dead_nodes()
        return (time.perf_counter() - start) / calls
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--no-ray", action="store_true", help="skip the node-sweep timing")
    args = parser.parse_args()
    probes = synthetic_job(args.ranks)
    rows = {}
    for show_all in (False, True):
        trials = [render_seconds(probes, show_all) for _ in range(args.trials)]
        rows[show_all] = (statistics.median(t for t, _ in trials), trials[0][1])
    folded, every = rows[False], rows[True]
    print(f"status, {args.ranks:,} ranks, median of {args.trials}:")
    print(f"  folded (default)       {folded[0] * 1e3:9.1f} ms  {folded[1]:6,} lines")
    print(f"  a row per process      {every[0] * 1e3:9.1f} ms  {every[1]:6,} lines (--all)")
    print(f"  ratio                  {every[0] / folded[0]:9.1f}x")
    if not args.no_ray:
        per_call = node_sweep_seconds(200)
        print(f"hub node sweep: dead_nodes() {per_call * 1e3:.2f} ms per read (mean "
              "of 200, 1-node local cluster), once per 3 s")  # fmt: skip


if __name__ == "__main__":
    main()
