"""A short Ray job whose two ranks step with loss, tokens and grad norm, then end.

    python steps_job.py ADDRESS STEPS

Prints the job id. The driver pauses 1.5 s after training (as a checkpoint save would) and
exits; its ranks die with it. `rankscope report` reads their step series afterwards.
"""

from __future__ import annotations

import math
import sys
import time

import ray


class SteppingRank:
    def __init__(self, rank: int) -> None:
        import rankscope

        self.rank = rank
        rankscope.init(rank=rank, world_size=2, group="steps")

    def train(self, steps: int) -> int:
        import rankscope

        for i in range(1, steps + 1):
            loss = 2.0 * math.exp(-i / 100) + 0.01 * self.rank
            if self.rank == 1 and i > steps // 2:
                loss += (i - steps // 2) * 0.02  # rank 1's loss climbs in the second half
            rankscope.step(loss=loss, tokens=1000, grad_norm=1.0 + 0.1 * self.rank)
            time.sleep(0.005)
        return steps


if __name__ == "__main__":
    ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
    ranks = [ray.remote(num_cpus=0)(SteppingRank).remote(r) for r in (0, 1)]
    ray.get([r.train.remote(int(sys.argv[2])) for r in ranks])
    print(ray.get_runtime_context().get_job_id(), flush=True)
    time.sleep(1.5)  # the checkpoint: a heartbeat or two after the last step
