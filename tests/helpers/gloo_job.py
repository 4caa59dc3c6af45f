"""A separate Ray job: a healthy 4-rank gloo group that trained a few steps and idles.

Prints its job id, then keeps the job alive until stdin closes. Being its own job, its
registry holds nothing from other tests: a clean slate to check the healthy verdict on.
"""

from __future__ import annotations

import sys

import ray

from helpers.workers import GlooRank, form_group

if __name__ == "__main__":
    ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
    actor = ray.remote(num_cpus=0)(GlooRank)
    ranks = [actor.remote(r, 4) for r in range(4)]
    form_group(ranks)
    ray.get([r.reduce_steps.remote(3) for r in ranks])
    print(ray.get_runtime_context().get_job_id(), flush=True)
    sys.stdin.read()
