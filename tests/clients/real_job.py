"""A user's job on a real client: verl's single controller or Ray Train's TorchTrainer.

    python real_job.py ADDRESS verl|train FAULT_RANK RELEASE_FILE [stall|straggle]

Installs rankscope only through the setup hook (no code change), prints its job id, trains
(one rank stalls before the 3rd all_reduce, then goes on, dies or raises as the release file
says, see real_clients.py), then prints `done` or the error the client raised.
"""

from __future__ import annotations

import sys

import ray
from real_clients import ray_train_loop, verl_worker_class

WORLD = 4


def run_verl(fault_rank: int, release_file: str, mode: str) -> None:
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    pool = RayResourcePool(process_on_nodes=[WORLD], use_gpu=False, max_colocate_count=1)
    workers = RayWorkerGroup(
        pool, RayClassWithInitArgs(cls=ray.remote(verl_worker_class())), device_name="cpu"
    )
    run = workers.straggle if mode == "straggle" else workers.train
    run(fault_rank, release_file)


def run_ray_train(fault_rank: int, release_file: str, mode: str) -> None:
    from ray.train import ScalingConfig
    from ray.train.torch import TorchTrainer

    trainer = TorchTrainer(
        ray_train_loop,
        train_loop_config={"fault_rank": fault_rank, "release_file": release_file, "mode": mode},
        scaling_config=ScalingConfig(num_workers=WORLD, use_gpu=False),
    )
    trainer.fit()


if __name__ == "__main__":
    address, client, fault_rank, release_file = sys.argv[1:5]
    mode = sys.argv[5] if len(sys.argv) > 5 else "stall"
    ray.init(
        address=address,
        logging_level="ERROR",
        log_to_driver=False,
        runtime_env={"worker_process_setup_hook": "rankscope.setup_worker"},
    )
    print(ray.get_runtime_context().get_job_id(), flush=True)
    run = run_verl if client == "verl" else run_ray_train
    try:
        run(int(fault_rank), release_file, mode)
        print("done", flush=True)
    except Exception as exc:
        print(f"failed: {type(exc).__name__}", flush=True)
