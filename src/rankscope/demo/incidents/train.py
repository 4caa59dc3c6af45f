"""The user's training code, the same on every client: a small data-parallel MLP on gloo.

No rankscope call except for the numeric incidents (`rankscope.step(loss=...)`, `watch_nan`,
`verify_distributed_tensors`), as a user following the README would add them. Each fault is
injected on one rank at `FAULT_STEP` by the line tagged `# incident: NAME`: that line is the
`where` the verdict must name. Each step all_reduces the gradients and a stop flag in one flat
tensor, so every rank leaves the loop at the same step when the runner writes `stop`.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import subprocess
import threading
import time
from typing import TYPE_CHECKING, Any

from rankscope.demo.incidents.common import FAULT_RANK, RUN_FOR_S, mark_symptom, stopped

if TYPE_CHECKING:
    import torch

STEP_S = 0.1
"""Each step's compute (a sleep: two cores are shared by many ranks)."""
FAULT_STEP = 40
"""The step the fault starts at (about 6 s of training on two loaded cores)."""
CHECKPOINT_S = 20.0
"""The healthy checkpoint's save on rank 0, while the others wait in a barrier."""
LEAK_BYTES = 4 << 20
LEAK_CAP = 1 << 30
"""The leak grows 4 MiB a step up to 1 GiB: plain to see, and bounded on a shared machine."""
NUMERIC = ("nan", "loss_spike", "divergence", "drift", "leak", "loss_divergence")
"""Incidents whose user code reports its numbers: `rankscope.step(loss=...)` and friends."""

FAULTS = {
    "exception": "raises ValueError in its step; the others wait in all_reduce",
    "stall_loader": "stalls in its data loader (a sleep)",
    "stall_lock": "blocks on a lock another thread holds forever",
    "stall_queue": "blocks on a prefetch queue nothing fills",
    "stall_child": "waits for a child process that never ends",
    "stall_ray_get": "waits in ray.get on an actor that never answers",
    "spin": "spins in its own code forever (busy, no progress)",
    "sigkill": "is killed by SIGKILL",
    "exit": "exits (os._exit(3))",
    "oom": "is killed by the kernel's OOM killer (a memory cgroup of its own)",
    "node_lost": "loses its node (the node is removed from the cluster)",
    "extra_collective": "calls one barrier the others do not",
    "shape": "all_reduces one more element than the others",
    "dtype": "all_reduces float64 where the others pass float32",
    "kind": "broadcasts where the others all_reduce",
    "cross_group": "enters a second group's all_reduce before the default group's",
    "straggler": "computes twice as long every step",
    "straggler_data": "reads each batch slowly",
    "drift": "slows by 5 ms more every step",
    "nan": "feeds a NaN into its batch once (watch_nan)",
    "loss_spike": "has one batch 30x too large (rankscope.step(loss=))",
    "loss_divergence": "trains on shifted labels: its loss stays apart",
    "divergence": "skips the gradient sync: its weights drift (verify_distributed_tensors)",
    "leak": "keeps 4 MiB more every step",
    "breakpoint": "stops at a breakpoint() left in the code",
    "error_burst": "logs 10 errors a step for 5 steps (stdlib logging)",
    "env_skew": "runs with its own NCCL_ALGO and TORCH_NCCL_BLOCKING_WAIT",
    "checkpoint": "(healthy) rank 0 saves a checkpoint for 20 s; the others wait in a barrier",
}
"""What each fault does on the faulty rank, for the catalog's listing."""

log = logging.getLogger("train.data")
_cache_lock = threading.Lock()


def run(
    rank: int,
    world: int,
    job_dir: str,
    fault: str,
    *,
    faulty: int = FAULT_RANK,
    steps: int | None = None,
) -> int:
    """Train until `stop`, `steps` or `RUN_FOR_S`; rank `faulty` injects `fault` at `FAULT_STEP`."""
    import torch
    import torch.distributed as dist
    from torch import nn

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    me = rank == faulty
    numeric = fault in NUMERIC
    if numeric:
        import rankscope

        if fault == "nan":
            rankscope.watch_nan(model)
    if me and fault == "env_skew":
        mark_symptom(job_dir)  # the skew is there from the start
    side = dist.new_group(list(range(world))) if fault == "cross_group" else None
    kept: list[bytearray] = []
    started = time.time()
    step = 0
    while time.time() - started < RUN_FOR_S and (steps is None or step < steps):
        at = me and step == FAULT_STEP
        after = me and step >= FAULT_STEP
        inputs, targets = load_batch(rank, step, job_dir, fault if after else "", at)
        compute(step, job_dir, fault if after else "", at)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(inputs), targets)
        if at and fault == "exception":
            mark_symptom(job_dir)
            raise ValueError(f"bad batch at step {step}")  # incident: exception
        loss.backward()
        flat = torch.cat([grad_of(p).flatten() for p in model.parameters()] + [torch.zeros(1)])
        flat[-1] = float(stopped(job_dir))
        if side is not None and step == FAULT_STEP:
            cross_groups(flat, side, me, job_dir)
        else:
            reduce_gradients(flat, job_dir, fault if after else "", at)
        if at and fault == "oom":
            grow_past_memory_limit(job_dir)
        if at and fault == "node_lost":
            with open(os.path.join(job_dir, "node_ready"), "w") as f:
                f.write("ready")  # the runner removes this rank's node now
        if not (after and fault == "divergence"):  # incident: divergence
            offset = 0
            for p in model.parameters():
                n = p.numel()
                grad_of(p).copy_(flat[offset : offset + n].view_as(p) / world)
                offset += n
        elif at:
            mark_symptom(job_dir)  # this rank keeps its own gradients: a missed sync
        optimizer.step()
        if at and fault == "checkpoint":
            save_checkpoint(model, job_dir)
        if fault == "checkpoint" and step == FAULT_STEP:
            dist.barrier()  # every rank waits for rank 0's checkpoint
        if after and fault == "leak" and len(kept) * LEAK_BYTES < LEAK_CAP:
            if at:
                mark_symptom(job_dir)
            kept.append(bytearray(b"\x01" * LEAK_BYTES))  # incident: leak
        if after and fault == "error_burst" and step < FAULT_STEP + 5:
            if at:
                mark_symptom(job_dir)
            for shard in range(10):
                log.error("reading shard %d failed: timed out", shard)  # incident: error_burst
        if at and fault == "breakpoint":
            mark_symptom(job_dir)
            breakpoint()  # incident: breakpoint
        if numeric:
            import rankscope

            rankscope.step(loss=loss.item(), tokens=len(inputs))
            if fault == "divergence" and step % 20 == 19:
                rankscope.verify_distributed_tensors(model, operation_name=f"step {step}")
        step += 1
        if flat[-1].item() > 0:
            break
    return step


def grad_of(parameter: torch.nn.Parameter) -> torch.Tensor:
    """The parameter's gradient, there after `backward()`."""
    assert parameter.grad is not None
    return parameter.grad


def load_batch(
    rank: int, step: int, job_dir: str, fault: str, at: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The data loader: a batch per step (the stalls and slow reads of the data faults)."""
    import torch

    if at and fault == "stall_loader":
        mark_symptom(job_dir)
        time.sleep(3600)  # incident: stall_loader
    if at and fault == "stall_queue":
        mark_symptom(job_dir)
        prefetched: queue.Queue = queue.Queue()  # its producer thread never started
        prefetched.get()  # incident: stall_queue
    if at and fault == "stall_child":
        mark_symptom(job_dir)
        pid_file = os.path.join(job_dir, "child.pid")  # the runner ends it after the job
        child = ["sh", "-c", f"echo $$ > {pid_file}; exec sleep 3600"]
        subprocess.run(child, check=False)  # incident: stall_child
    if at and fault == "stall_ray_get":
        import ray

        server_cls: Any = ray.remote(ShardServer)
        shards = server_cls.options(num_cpus=0).remote()
        mark_symptom(job_dir)
        ray.get(shards.read.remote(step))  # incident: stall_ray_get
    if fault == "straggler_data":
        if at:
            mark_symptom(job_dir)
        time.sleep(STEP_S)  # incident: straggler_data
    generator = torch.Generator().manual_seed(step * 1000 + rank)
    inputs = torch.randn(32, 16, generator=generator)
    if at and fault == "loss_spike":
        mark_symptom(job_dir)
        inputs = inputs * 30  # incident: loss_spike
    if fault == "loss_divergence":
        if at:
            mark_symptom(job_dir)
        return inputs, inputs.sum(dim=1, keepdim=True) * 0.1 + 3.0  # incident: loss_divergence
    if at and fault == "nan":
        mark_symptom(job_dir)
        inputs[0, 0] = float("nan")  # incident: nan
    return inputs, inputs.sum(dim=1, keepdim=True) * 0.1


def compute(step: int, job_dir: str, fault: str, at: bool) -> None:
    """The step's compute; the straggler and drift faults make it slower on one rank."""
    if at and fault == "stall_lock":
        threading.Thread(target=_cache_lock.acquire, daemon=True).start()  # never released
        time.sleep(0.1)
        mark_symptom(job_dir)
        with _cache_lock:  # incident: stall_lock
            pass
    if at and fault == "spin":
        mark_symptom(job_dir)
        spin()
    if fault == "straggler":
        if at:
            mark_symptom(job_dir)
        time.sleep(STEP_S)  # incident: straggler
    if fault == "drift":
        if at:
            mark_symptom(job_dir)
        time.sleep(0.005 * (step - FAULT_STEP))  # incident: drift
    time.sleep(STEP_S)


def spin() -> None:
    """A rank busy in its own code forever (CPU is not progress)."""
    total = 0
    while True:  # incident: spin (where a sampled stack of this loop lands)
        total += 1


def reduce_gradients(flat: torch.Tensor, job_dir: str, fault: str, at: bool) -> None:
    """The gradient all_reduce; the collective faults happen here on the faulty rank."""
    import torch
    import torch.distributed as dist

    if at and fault in ("sigkill", "exit"):
        mark_symptom(job_dir)
        if fault == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)  # incident: sigkill
        os._exit(3)  # incident: exit
    if at and fault == "extra_collective":
        mark_symptom(job_dir)
        dist.barrier()  # incident: extra_collective
    if at and fault == "shape":
        mark_symptom(job_dir)
        dist.all_reduce(torch.cat([flat, torch.zeros(1)]))  # incident: shape
        return
    if at and fault == "dtype":
        mark_symptom(job_dir)
        dist.all_reduce(flat.double())  # incident: dtype
        return
    if at and fault == "kind":
        mark_symptom(job_dir)
        dist.broadcast(flat, src=0)  # incident: kind
        return
    dist.all_reduce(flat)


def cross_groups(flat: torch.Tensor, side: Any, me: bool, job_dir: str) -> None:
    """Two groups entered in opposite orders: rank `me` goes to the side group first."""
    import torch.distributed as dist

    if me:
        mark_symptom(job_dir)
        dist.all_reduce(flat, group=side)  # incident: cross_group
        dist.all_reduce(flat)
    else:
        dist.all_reduce(flat)
        dist.all_reduce(flat, group=side)


def grow_past_memory_limit(job_dir: str) -> None:
    """The out-of-memory kill, bounded to this one process: a memory cgroup of its own with a
    limit 256 MiB over what it uses, then allocations until the kernel's OOM killer ends it."""
    cgroup = own_memory_cgroup(job_dir, 256 << 20)
    with open(os.path.join(job_dir, "oom.cgroup"), "w") as f:
        f.write(cgroup)  # the runner removes it after the job
    mark_symptom(job_dir)
    grown = []
    while True:
        grown.append(bytearray(b"\x01" * (16 << 20)))  # incident: oom


def own_memory_cgroup(job_dir: str, headroom: int) -> str:
    """A child of this process's memory cgroup (v2 `memory.max`, else v1's limit) holding only
    this process; its limit is the process's resident memory plus `headroom` bytes."""
    with open("/proc/self/status") as f:
        rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    limit = str(rss + headroom)
    with open("/proc/self/cgroup") as f:
        lines = [line.strip().split(":", 2) for line in f]
    v1 = [path for _, controllers, path in lines if "memory" in controllers.split(",")]
    if v1:
        parent = "/sys/fs/cgroup/memory" + v1[0]
        limit_file = "memory.limit_in_bytes"
    else:
        parent = "/sys/fs/cgroup" + next(path for h, _, path in lines if h == "0")
        limit_file = "memory.max"
    cgroup = os.path.join(parent.rstrip("/"), f"rs-incident-oom-{os.getpid()}")
    os.makedirs(cgroup, exist_ok=True)
    with open(os.path.join(cgroup, limit_file), "w") as f:
        f.write(limit)
    with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
    return cgroup


def save_checkpoint(model: torch.nn.Module, job_dir: str) -> None:
    """Rank 0's slow save (healthy: the others wait for it in a barrier)."""
    import torch

    path = os.path.join(job_dir, "checkpoint.pt")
    state = {"model": model.state_dict(), "optimizer": torch.zeros(2 << 20)}  # 8 MiB, as Adam's
    deadline = time.time() + CHECKPOINT_S
    while time.time() < deadline:  # a slow file system: a shard at a time, 16 MiB/s
        torch.save(state, path)
        time.sleep(0.5)


class ShardServer:
    """An actor the faulty rank asks for a shard; it never answers (its `read` hangs)."""

    def read(self, step: int) -> bytes:
        time.sleep(3600)
        return b""
