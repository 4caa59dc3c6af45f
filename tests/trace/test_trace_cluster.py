"""Tracing on the real cluster: `rankscope trace` over a live 4-rank gloo job (setup hook, no
code change but `rankscope.step()`) names the slow rank; `enable_detailed_tracing` in a driver
traces its actors' `debug_decorator` calls across both nodes."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
from collections import defaultdict

import ray
import torch
from test_trace_analysis import trace_problems

import rankscope
from helpers.cluster import cluster_address, run_cli
from helpers.workers import WORKER_NODE_RESOURCE, wait_until
from rankscope.runtime.client import HubClient

JOB = textwrap.dedent(
    """
    import os, sys, time

    import ray

    ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False,
             runtime_env={"worker_process_setup_hook": "rankscope.setup_worker"})


    @ray.remote(num_cpus=0)
    class Trainer:
        def __init__(self, rank, world):
            self.rank, self.world = rank, world

        def address(self):
            import socket
            with socket.socket() as s:
                s.bind(("", 0))
                return socket.gethostbyname(socket.gethostname()), s.getsockname()[1]

        def join(self, host, port):
            import torch.distributed as dist
            dist.init_process_group("gloo", init_method=f"tcp://{host}:{port}",
                                    rank=self.rank, world_size=self.world)

        def train(self, stop_file):
            import torch
            import torch.distributed as dist
            import rankscope

            while True:
                with rankscope.span("compute"):
                    time.sleep(0.03 + (0.05 if self.rank == 2 else 0.0))
                grad = torch.ones(1024)
                grad[0] = float(os.path.exists(stop_file))  # every rank stops at the same step
                dist.all_reduce(grad)
                rankscope.step()
                if grad[0] > 0:
                    return


    stop_file = sys.argv[2]
    ranks = [Trainer.remote(r, 4) for r in range(4)]
    host, port = ray.get(ranks[0].address.remote())
    ray.get([r.join.remote(host, port) for r in ranks])
    done = [r.train.remote(stop_file) for r in ranks]
    print(ray.get_runtime_context().get_job_id(), flush=True)
    ray.get(done)
    """
)


def test_trace_names_the_slow_rank_and_writes_one_aligned_trace(cluster, tmp_path):
    script, stop, out = tmp_path / "job.py", tmp_path / "stop", tmp_path / "trace.json"
    profiled_out = tmp_path / "profiled.json"
    script.write_text(JOB)
    job = subprocess.Popen(
        [sys.executable, str(script), cluster_address(), str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert job.stdout is not None
        job_id = job.stdout.readline().strip()
        wait_until(
            lambda: (
                sum(
                    p.context.rank is not None and p.progress.step > 3
                    for p in HubClient.attach().probes(job_id)
                )
                == 4
            ),
            timeout=90,
            what="the job's four ranks to step",
        )
        result = run_cli(
            "trace", "--address", cluster_address(), "--job", job_id,
            "--duration", "5s", "-o", str(out), "--json",
        )  # fmt: skip
        profiled = run_cli(
            "trace", "--address", cluster_address(), "--job", job_id, "--ranks", "0",
            "--torch-profiler", "--steps", "2", "--duration", "4s", "-o", str(profiled_out),
        )  # fmt: skip
    finally:
        stop.write_text("stop")
        try:
            job.wait(timeout=60)
        except subprocess.TimeoutExpired:
            job.kill()
    assert result.returncode == 1, result.stdout + result.stderr
    data = json.loads(result.stdout)["data"]
    assert [s["rank"] for s in data["stragglers"] if s["is_straggler"]] == [2]
    # a copy in the job's run directory, where `rankscope report` reads traces
    (kept,) = [n for n in data["notes"] if n.startswith("also kept in the run directory: ")]
    assert json.loads(pathlib.Path(kept.split(": ", 1)[1]).read_text())["traceEvents"]
    rows = {r["rank"]: r for r in data["ranks"]}
    assert all(rows[r]["wait_share"] > rows[2]["wait_share"] + 0.2 for r in (0, 1, 3))
    assert all(rows[r]["steps"] > 20 for r in range(4))

    doc = json.loads(out.read_text())
    assert trace_problems(doc) == []
    events = doc["traceEvents"]
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    for rank in range(4):
        assert any(n.startswith(f"rank {rank} (Trainer) ") for n in tracks.values()), tracks
    per_rank = defaultdict(lambda: defaultdict(list))
    for e in events:
        if e["ph"] in ("X", "i"):
            rank = int(tracks[(e["pid"], e["tid"])].split()[1])
            per_rank[rank][e["name"]].append(e)
    for rank in range(4):
        assert len(per_rank[rank]["all_reduce"]) > 20
        assert any(e["name"].startswith("step ") for e in per_rank[rank].values() for e in e)
    wait_ms = {r: sum(e["args"]["wait_ms"] for e in per_rank[r]["all_reduce"]) for r in range(4)}
    assert all(wait_ms[r] > 2 * wait_ms[2] for r in (0, 1, 3)), wait_ms

    # clocks: the same all_reduce ends at (nearly) the same instant on every rank, within the
    # error the trace states (plus gloo's own spread between ranks, a few milliseconds here)
    error_ms = max(c["error_ms"] for c in doc["otherData"]["clock_offsets"].values())
    ends = defaultdict(list)
    for rank in range(4):
        for e in per_rank[rank]["all_reduce"]:
            ends[e["args"]["seq"]].append((e["ts"] + e["dur"]) / 1000)
    spreads = sorted(max(v) - min(v) for v in ends.values() if len(v) == 4)
    assert spreads and spreads[len(spreads) // 2] <= 2 * error_ms + 5.0, (error_ms, spreads[:5])

    # --torch-profiler through the CLI: rank 0's ops of two steps on tracks of their own
    assert profiled.returncode in (0, 1), profiled.stdout + profiled.stderr
    doc = json.loads(profiled_out.read_text())
    assert trace_problems(doc) == []
    tracks = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in doc["traceEvents"]
        if e["name"] == "thread_name"
    }
    profiler_ops = {
        e["name"]
        for e in doc["traceEvents"]
        if e["ph"] == "X" and "torch.profiler" in tracks.get((e["pid"], e["tid"]), "")
    }
    assert "aten::ones" in profiler_ops, sorted(profiler_ops)[:20]
    assert all(n.startswith("rank 0 ") for n in tracks.values() if "torch.profiler" not in n)


class Tracer:
    """An actor whose method is traced with `debug_decorator`."""

    def __init__(self, rank: int) -> None:
        rankscope.init(rank=rank, world_size=2, group="trace-api-test")

    def registered(self) -> bool:
        probe = rankscope.current_probe()
        return probe is not None and probe.connected.wait(60)

    @rankscope.debug_decorator(capture_args=True, memory_monitoring=True)
    def forward(self, batch: torch.Tensor) -> float:
        self.kept = bytearray(4 << 20)
        return float(batch.sum())


def test_enable_detailed_tracing_traces_the_driver_and_decorated_actor_calls(cluster):
    actor = ray.remote(num_cpus=0)(Tracer)
    actors = [
        actor.remote(0),
        actor.options(resources={WORKER_NODE_RESOURCE: 1}).remote(1),
    ]
    assert ray.get([a.registered.remote() for a in actors], timeout=180) == [True, True]
    try:
        tracing = rankscope.enable_detailed_tracing()
        with tracing, rankscope.span("driver step"):
            assert ray.get([a.forward.remote(torch.ones(3, 5)) for a in actors]) == [15.0] * 2
    finally:
        for a in actors:
            ray.kill(a)
    # written to the job's run directory, through the hub (on this machine in the tests)
    run_dir = os.environ["RANKSCOPE_RUN_DIR"]
    assert tracing.path is not None and tracing.path.startswith(run_dir), tracing.path
    doc = json.loads(pathlib.Path(tracing.path).read_text())
    assert trace_problems(doc) == []
    events = doc["traceEvents"]
    calls = [e for e in events if e["name"] == "Tracer.forward"]
    assert len(calls) == 2
    for call in calls:
        assert call["args"]["args"] == {"batch": "Tensor(float32[3, 5], cpu)"}
        assert call["args"]["rss_delta_bytes"] >= 0
    assert len({c["pid"] for c in calls}) == 2 or len({c["tid"] for c in calls}) == 2
    names = {e["name"] for e in events}
    assert {"driver step", "ray.get"} <= names
