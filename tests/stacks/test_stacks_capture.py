"""A confirming look is spaced on the rank's own clock (`capture.LookSpacing`): `stacks` asks
each rank for its second look at once, and the rank takes it `apart_s` after its first, so no
rank is looked at twice less than `apart_s` apart however long the first look took to gather."""

from __future__ import annotations

import threading
import time

from rankscope.runtime.probe import _HANDLERS
from rankscope.stacks.worker import LookSpacing


def _parked_thread() -> tuple[threading.Thread, threading.Event]:
    release = threading.Event()

    def parked_in_a_named_wait() -> None:
        release.wait(30)

    thread = threading.Thread(target=parked_in_a_named_wait, name="parked", daemon=True)
    thread.start()
    return thread, release


def test_a_second_look_waits_out_the_spacing_since_the_first():
    thread, release = _parked_thread()
    try:
        looks = LookSpacing()
        looks.capture(0.3)
        first_done = time.monotonic()
        stacks = looks.capture(0.3)
        assert time.monotonic() - first_done >= 0.29
        (parked,) = [s for s in stacks if s.thread_name == "parked"]
        assert any(f.function == "parked_in_a_named_wait" for f in parked.frames), parked
    finally:
        release.set()
        thread.join()


def test_a_look_already_spaced_or_unspaced_is_taken_at_once():
    looks = LookSpacing()
    start = time.monotonic()
    looks.capture(5.0)  # nothing to be spaced from yet
    looks.capture(0.0)  # the first look of a command: never waits
    assert time.monotonic() - start < 1.0
    time.sleep(0.2)
    start = time.monotonic()
    looks.capture(0.2)  # 0.2 s have passed since the last look
    assert time.monotonic() - start < 0.1


def test_the_probe_s_stacks_command_spaces_its_looks():
    stacks_command = _HANDLERS["stacks"]
    stacks_command({})
    done = time.monotonic()
    stacks_command({"apart_s": 0.25})
    assert time.monotonic() - done >= 0.24
