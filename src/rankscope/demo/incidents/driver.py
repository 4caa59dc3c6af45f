"""One incident's driver, as its user would start the job:

    python -m rankscope.demo.incidents.driver NAME ADDRESS JOB_DIR

Joins the cluster with rankscope installed only by the setup hook, prints its Ray job id, runs
the incident's job, then prints `done` or the error the job raised.
"""

from __future__ import annotations

import logging
import sys


def main(name: str, address: str, job_dir: str) -> None:
    import ray

    from rankscope.demo.incidents.catalog import by_name

    incident = by_name(name)
    ray.init(
        address=address,
        logging_level=logging.ERROR,
        log_to_driver=False,
        runtime_env={
            "worker_process_setup_hook": "rankscope.setup_worker",
            "env_vars": dict(incident.env),
        },
    )
    print(ray.get_runtime_context().get_job_id(), flush=True)
    try:
        incident.run(job_dir)
        print("done", flush=True)
    except Exception as exc:
        print(f"failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
