"""Which thread says where a process is: synthetic stacks, as Ray Train and verl lay them out."""

from __future__ import annotations

from rankscope.stacks.model import Frame, ThreadStack, active_thread, headline

RAY_LOOP = Frame("main_loop", "/venv/site-packages/ray/_private/worker.py", 1069, True)
ALL_REDUCE = Frame(
    "all_reduce", "/venv/site-packages/torch/distributed/distributed_c10d.py", 3252, True
)
USER = Frame("wait_for_release", "/job/train.py", 21, False)
SLEEP = Frame("wait", "/usr/lib/python3.11/threading.py", 327, True)


def _thread(name: str, *frames: Frame, main: bool = False) -> ThreadStack:
    return ThreadStack(name, hash(name), main, frames)


def test_ray_train_the_training_thread_not_the_idle_main_thread():
    threads = [
        _thread("MainThread", RAY_LOOP, main=True),
        _thread("TrainingThread", USER, Frame("run", "/venv/site-packages/ray/train.py", 9, True)),
        _thread("PythonGCThread", SLEEP),
    ]
    assert headline(active_thread(threads).frames) == "wait_for_release train.py:21"


def test_the_thread_in_a_collective_wins_over_user_code_elsewhere():
    threads = [
        _thread("MainThread", USER, main=True),
        _thread("TrainingThread", ALL_REDUCE, Frame("step", "/job/train.py", 36, False)),
    ]
    assert active_thread(threads).thread_name == "TrainingThread"


def test_verl_the_main_thread_runs_the_method_and_an_idle_process_is_its_main_thread():
    busy = [_thread("MainThread", USER, RAY_LOOP, main=True), _thread("io", SLEEP)]
    assert active_thread(busy).is_main
    idle = [_thread("io", SLEEP), _thread("MainThread", RAY_LOOP, main=True)]
    assert active_thread(idle).is_main
    assert active_thread([]) is None
