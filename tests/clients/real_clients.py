"""User code for the real clients: a verl Worker and a Ray Train loop, both plain gloo DDP steps.

No rankscope call in here: the probe comes from the setup hook, as in a user's job. Each rank
runs `STEPS` all_reduces; the faulty rank waits in `wait_for_release` before the 3rd one until
the test writes its release file: `go` to carry on, `die` to `os._exit(1)`, `raise` to raise
`ValueError("bad batch")` from the user's code while its peers wait in all_reduce. In the
`straggle` mode all ranks step healthily, printing their loss, until the test writes
`<release>.straggle`; then the faulty rank computes slower every step until `<release>.stop`,
and then it stalls as above (one job, several incidents, as in a long run).
"""

from __future__ import annotations

import os
import time

STEPS = 5
FAULT_STEP = 2
"""0-based: the rank stalls before the 3rd all_reduce."""


def wait_for_release(path: str) -> str:
    """The stalled rank's user code: what `stacks` and `hang` must name."""
    while not os.path.exists(path):
        time.sleep(0.05)
    with open(path) as f:
        return f.read().strip()


def train_steps(rank: int, fault_rank: int, release_file: str) -> int:
    """A few gloo all_reduces; the faulty rank stalls before the 3rd, then goes on or dies."""
    import torch
    import torch.distributed as dist

    for step in range(STEPS):
        stalls = step == FAULT_STEP and rank == fault_rank
        release = wait_for_release(release_file) if stalls else ""
        if release == "die":
            os._exit(1)
        if release == "raise":
            raise ValueError("bad batch")
        grad = torch.full((8,), float(rank))
        dist.all_reduce(grad)
    return rank


def straggle_steps(rank: int, slow_rank: int, stop_file: str, straggle_file: str) -> int:
    """Steps of 30 ms compute (50 ms more on `slow_rank` once `straggle_file` exists) and one
    all_reduce, printing the loss as users do, until the stop file appears: every rank stops at
    the same step. After its first all_reduce each rank writes `<stop_file>.stepped<rank>`."""
    import torch
    import torch.distributed as dist

    step, slow = 0, False
    while True:
        slow = slow or (rank == slow_rank and os.path.exists(straggle_file))
        time.sleep(0.03 + (0.05 if slow else 0.0))
        stop = torch.tensor([float(os.path.exists(stop_file))])
        dist.all_reduce(stop)
        print(f"step {step} loss={0.5 + 0.01 * rank:.3f}", flush=True)
        if step == 0:
            with open(f"{stop_file}.stepped{rank}", "w") as f:
                f.write("1")
        step += 1
        if stop.item() > 0:
            return step


def straggle_then_train(rank: int, fault_rank: int, release_file: str) -> int:
    """The straggle mode: `straggle_steps` (slow from `<release>.straggle` on) until
    `<release>.stop`, then `train_steps`. Rank 0 writes how many all_reduces the straggle took
    to `<release>.straggled`: the stall's collective numbers follow them."""
    straggled = straggle_steps(rank, fault_rank, f"{release_file}.stop", f"{release_file}.straggle")
    if rank == 0:
        with open(f"{release_file}.straggled", "w") as f:
            f.write(str(straggled))
    return train_steps(rank, fault_rank, release_file)


def ray_train_loop(config: dict) -> None:
    """Ray Train's train_loop_per_worker: runs in Ray Train's training thread."""
    import ray.train

    rank = ray.train.get_context().get_world_rank()
    if config.get("mode") == "straggle":
        straggle_then_train(rank, config["fault_rank"], config["release_file"])
    else:
        train_steps(rank, config["fault_rank"], config["release_file"])


def verl_worker_class() -> type:
    """A verl Worker with one ONE_TO_ALL method, built after verl is imported."""
    import torch.distributed as dist
    from verl.single_controller.base import Worker
    from verl.single_controller.base.decorator import Dispatch, register

    class TrainWorker(Worker):
        def __init__(self) -> None:
            super().__init__()
            dist.init_process_group("gloo")

        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def train(self, fault_rank: int, release_file: str) -> int:
            return train_steps(dist.get_rank(), fault_rank, release_file)

        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def straggle(self, fault_rank: int, release_file: str) -> int:
            return straggle_then_train(dist.get_rank(), fault_rank, release_file)

    return TrainWorker
