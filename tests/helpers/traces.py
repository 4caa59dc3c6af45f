"""Synthetic traces of a 4-rank gloo job (no Ray): the trace tests' and the report's input."""

from __future__ import annotations

from rankscope.context import RankContext
from rankscope.hang.model import CallState, CollectiveRecord
from rankscope.runtime.clock import ClockEstimate
from rankscope.runtime.protocol import ProbeInfo, ProbeState, ProbeStatus, Progress
from rankscope.trace.model import RankTrace

T0 = 1_700_000_000.0


def status(rank: int, node_ip: str = "10.0.0.1", pid: int = 0) -> ProbeStatus:
    ctx = RankContext(
        rank=rank, local_rank=rank, world_size=4, node_id=f"n-{node_ip}", node_ip=node_ip,
        hostname="host", pid=pid or 1000 + rank, job_id="01000000", actor_id=None,
        actor_class="Worker", task_id=None, rank_source="env", group="10.0.0.1:29500",
    )  # fmt: skip
    info = ProbeInfo(f"p{rank}", ctx, "0", 0.0)
    return ProbeStatus(info, ProbeState.ALIVE, T0, T0, Progress(0, T0), 0, 0)


def synthetic_job(
    steps: int = 20,
    slow_rank: int = 2,
    extra_s: float = 0.05,
    offsets: dict[int, float] | None = None,
) -> list[RankTrace]:
    """4 ranks: 100 ms compute each step (+`extra_s` on `slow_rank`), then an all_reduce that
    ends 2 ms after the last arrival. Rank r's clock runs `offsets[r]` seconds behind the hub's."""
    offsets = offsets or {}
    traces = []
    for rank in range(4):
        lag = offsets.get(rank, 0.0)  # local = hub - lag
        trace = RankTrace(status(rank))
        trace.clock = ClockEstimate(offset_s=lag, error_s=0.0005, samples=10)
        trace.started_ns = round((T0 - lag) * 1e9)
        trace.stopped_ns = round((T0 + steps * 0.2 - lag) * 1e9)
        t = T0
        for step in range(steps):
            compute = 0.1 + (extra_s if rank == slow_rank else 0.0)
            arrive = t + compute
            last = t + 0.1 + extra_s
            end = last + 0.002
            span = ("forward", round((t - lag) * 1e9), round((arrive - lag) * 1e9), 1, None)
            trace.spans.append(span)
            trace.collectives.append(
                CollectiveRecord(
                    "0",
                    step + 1,
                    "all_reduce",
                    ((4,),),
                    ("float32",),
                    arrive - lag,
                    end - lag,
                    CallState.COMPLETED,
                    "train.py:10",
                )
            )
            trace.steps.append((round((end - lag) * 1e9), step + 1, 1))
            t = end
        traces.append(trace)
    return traces
