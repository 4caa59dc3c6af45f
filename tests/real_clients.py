"""User code for the real clients: a verl Worker and a Ray Train loop, both plain gloo DDP steps.

No rankscope call in here: the probe comes from the setup hook, as in a user's job. Each rank
runs `STEPS` all_reduces; the rank named by RS_FAULT_RANK waits in `wait_for_release` before
the 3rd one until the test writes its release file: `go` to carry on, `die` to `os._exit(1)`.
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
        if stalls and wait_for_release(release_file) == "die":
            os._exit(1)
        grad = torch.full((8,), float(rank))
        dist.all_reduce(grad)
    return rank


def ray_train_loop(config: dict) -> None:
    """Ray Train's train_loop_per_worker: runs in Ray Train's training thread."""
    import ray.train

    rank = ray.train.get_context().get_world_rank()
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

    return TrainWorker
