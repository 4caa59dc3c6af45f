"""why-pending asks Ray's state API of the cluster it connected to (`--address`), not of the one
Ray would find by itself (the newest cluster recorded on this machine): here a record that
points at a port nothing listens on."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile


def test_why_pending_reads_the_cluster_named_by_address_not_the_newest_one_here(cluster):
    with tempfile.TemporaryDirectory(prefix="rs-other-", dir="/tmp") as other:
        os.makedirs(os.path.join(other, "ray"))
        with open(os.path.join(other, "ray", "ray_current_cluster"), "w") as f:
            f.write("127.0.0.1:9")  # "the newest cluster on this machine": nothing there
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        command = ["why-pending", "--address", cluster.address]
        done = subprocess.run(
            [sys.executable, "-m", "rankscope.cli.main", *command],
            capture_output=True,
            text=True,
            timeout=240,
            env={**env, "RAY_TMPDIR": other},
        )
    assert done.returncode in (0, 1), done.stdout + done.stderr  # an answer, not an error
    # the session cluster has no dashboard: its GCS answered, as `--address` asked
    assert "read from Ray's GCS" in " ".join(done.stdout.split())
