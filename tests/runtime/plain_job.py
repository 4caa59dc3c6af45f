"""A separate Ray job whose worker code never imports rankscope.

The job's runtime_env installs the probe through `worker_process_setup_hook`. Prints the
worker's pid and job id, then keeps the job alive until stdin closes.
"""

from __future__ import annotations

import sys

import ray
from plain_worker import PlainWorker

if __name__ == "__main__":
    ray.init(
        address=sys.argv[1],
        logging_level="ERROR",
        log_to_driver=False,
        runtime_env={"worker_process_setup_hook": "rankscope.setup_worker"},
    )
    worker = ray.remote(num_cpus=0)(PlainWorker).remote()
    print(ray.get(worker.pid.remote()), ray.get_runtime_context().get_job_id(), flush=True)
    sys.stdin.read()
