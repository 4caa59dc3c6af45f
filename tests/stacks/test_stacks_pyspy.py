"""py-spy's fallback, one task per node: several processes in one run, real py-spy, no Ray."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rankscope.stacks.collect_pyspy import dump_many_local, pyspy_executable

pytestmark = pytest.mark.skipif(pyspy_executable() is None, reason="py-spy is not installed")

SLEEPER = """
import time
def parked_here():
    print("in", flush=True)
    time.sleep(60)
parked_here()
"""


def test_each_process_is_dumped_once_and_a_gone_one_says_why():
    sleepers = [
        subprocess.Popen([sys.executable, "-c", SLEEPER], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    for p in sleepers:
        assert p.stdout is not None and p.stdout.readline() == "in\n"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    try:
        pids = [p.pid for p in sleepers]
        dumps = dump_many_local([pids[0], pids[1], pids[0], gone.pid])
        assert list(dumps) == [pids[0], pids[1], gone.pid]
        for pid in pids:
            [main] = [t for t in dumps[pid] if not isinstance(t, str) and t.is_main]
            assert main.frames[0].function == "parked_here"
        assert isinstance(dumps[gone.pid], str) and str(gone.pid) in dumps[gone.pid]
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
