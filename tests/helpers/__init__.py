"""What tests of several features share: hub waits and the real CLI (`cluster`), the user code
Ray actors run (`workers`, `workers_logs`), one-line error checks (`errors`), synthetic traces
(`traces`) and a separate gloo job (`gloo_job.py`)."""
