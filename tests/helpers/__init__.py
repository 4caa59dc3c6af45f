"""What tests of several features share: hub waits and the real CLI (`cluster`), the user code
Ray actors run (`workers`, `workers_logs`), synthetic traces (`traces`) and a separate gloo job
(`gloo_job.py`)."""
