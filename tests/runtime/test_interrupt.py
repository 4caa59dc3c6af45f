"""Ctrl-C ends a refreshing command (`memory --watch`, `logs --follow`) within seconds, even where
the loop never sees its KeyboardInterrupt: each case runs in a child process sent a real
SIGINT."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

PRELUDE = """
import signal, sys, threading, time
from rankscope.runtime import interrupt
# Ctrl-C's handling as in a terminal (a test process, pytest-xdist's, may have it ignored and
# its children inherit that)
signal.signal(signal.SIGINT, signal.default_int_handler)
interrupt.GRACE_S = 1.0
print("ready", flush=True)
"""


def _interrupted(body: str) -> tuple[int, str, float]:
    """Run `body` in a child, send it one SIGINT once it is ready: its exit code, its output
    after the signal, and how long it took to exit."""
    code = PRELUDE + textwrap.dedent(body)
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready", child.communicate()[1]
    time.sleep(0.3)  # inside the loop
    sent = time.monotonic()
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=20)
    return child.returncode, out + err, time.monotonic() - sent


def test_a_loop_whose_ctrl_c_is_swallowed_still_ends_and_says_so():
    """Ray can hand the KeyboardInterrupt back as another exception, which a broad `except`
    takes: the loop asks `interrupted()` and ends cleanly."""
    code, out, took = _interrupted("""
        with interrupt.until_interrupted():
            while not interrupt.interrupted():
                try:
                    time.sleep(0.05)
                except BaseException:
                    pass
        print("ended")
    """)
    assert (code, out.strip()) == (0, "ended"), out
    assert took < 5, took


def test_a_loop_that_never_ends_leaves_with_130_after_the_grace():
    """A loop that ignores the Ctrl-C and the flag (a call blocked in C, say) is ended for it."""
    code, out, took = _interrupted("""
        with interrupt.until_interrupted():
            while True:
                try:
                    time.sleep(0.05)
                except BaseException:
                    pass
    """)
    assert code == 130, out
    assert 0.9 < took < 10, took


def test_a_main_thread_blocked_in_c_still_leaves_after_the_grace():
    """The signal reaches the process while its main thread cannot run Python (here, SIGINT is
    blocked there and taken by another thread, as when the main thread waits in C)."""
    code, out, took = _interrupted("""
        import signal
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])
        def unblocked():
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
            time.sleep(60)
        threading.Thread(target=unblocked, daemon=True).start()
        with interrupt.until_interrupted():
            lock = threading.Lock()
            lock.acquire()
            lock.acquire()
    """)
    assert code == 130, out
    assert took < 10, took


def test_outside_a_refresh_ctrl_c_is_python_s_own_again():
    """Once the loop ended, the handler and the wakeup fd are the ones from before."""
    code, out, _ = _interrupted("""
        import signal
        with interrupt.until_interrupted():
            pass
        restored = signal.getsignal(signal.SIGINT) is signal.default_int_handler
        print("restored" if restored and signal.set_wakeup_fd(-1) == -1 else "changed", flush=True)
        try:
            time.sleep(30)
        except KeyboardInterrupt:
            print("KeyboardInterrupt")
    """)
    assert code == 0 and out.split() == ["restored", "KeyboardInterrupt"], out


def test_an_error_after_the_ctrl_c_ends_the_loop_and_one_before_it_is_raised():
    """What Ray's calls make of the KeyboardInterrupt (another exception) ends the block
    quietly; an error with no Ctrl-C behind it still reaches the user."""
    code, out, took = _interrupted("""
        try:
            with interrupt.until_interrupted():
                raise ValueError("no Ctrl-C yet")
        except ValueError as exc:
            print("raised:", exc, flush=True)
        with interrupt.until_interrupted():
            while True:
                try:
                    time.sleep(0.05)
                except KeyboardInterrupt:
                    raise SystemError("returned a result with an exception set") from None
        print("ended")
    """)
    assert (code, out.splitlines()[:2]) == (0, ["raised: no Ctrl-C yet", "ended"]), out
    assert took < 5, took
