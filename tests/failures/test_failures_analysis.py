"""The exception record's pure parts: the user's frame, bounded text, the record, the rate limit."""

from __future__ import annotations

import json

from rankscope.failures.analysis import (
    MESSAGE_LIMIT,
    TRACEBACK_LIMIT,
    RateLimit,
    TraceFrame,
    alert_message,
    bounded,
    entry_frame,
    is_library_path,
    raised_in_collective,
    tail,
    task_error,
    user_frame,
    worth_recording,
)
from rankscope.failures.model import TaskError

ROOTS = ("/usr/lib/python3.11", "/venv/lib/python3.11/site-packages")
SITE = "/venv/lib/python3.11/site-packages"

RAY_TASK = [  # a verl worker method raising, as Ray's worker sees it (outermost first)
    TraceFrame("python/ray/_raylet.pyx", 2198, "ray._raylet.execute_task"),
    TraceFrame(f"{SITE}/ray/_private/function_manager.py", 740, "actor_method_executor"),
    TraceFrame(f"{SITE}/verl/single_controller/base/decorator.py", 431, "inner"),
    TraceFrame("/home/me/job/train.py", 88, "train"),
    TraceFrame("/home/me/job/data.py", 92, "load_batch"),
    TraceFrame(f"{SITE}/torch/utils/data/dataloader.py", 630, "__next__"),
    TraceFrame("/usr/lib/python3.11/json/decoder.py", 355, "raw_decode"),
]


def test_the_innermost_user_frame_is_picked_past_library_frames_below_it():
    frame = user_frame(RAY_TASK, ROOTS)
    assert frame == RAY_TASK[4] and frame.where == "data.py:92"


def test_library_code_outside_site_packages_is_still_not_the_users():
    """A source checkout of Ray, torch or verl, and rankscope's own machinery."""
    for path in (
        "/src/ray/python/ray/actor.py",
        "/src/pytorch/torch/distributed/distributed_c10d.py",
        "/src/verl/verl/single_controller/ray/base.py",
        "/work/rankscope/src/rankscope/failures/worker.py",
        "<frozen importlib._bootstrap>",
        "/usr/lib/python3.11/threading.py",
    ):
        assert is_library_path(path, ROOTS), path
    for path in (
        "/home/me/job/train.py",
        "/src/verl/verl/workers/fsdp_workers.py",  # verl's workers are the user's trainer code
        "/work/rankscope/src/rankscope/demo/train.py",  # the demo's user code
        "<string>",
        "/home/me/raytune/exp.py",
    ):
        assert not is_library_path(path, ROOTS), path
    assert not is_library_path(f"{SITE}/mypkg/model.py", ROOTS, user_roots=(f"{SITE}/mypkg",))


def test_a_collective_that_raised_under_the_users_frame_is_told_apart():
    """A peer died: the rank's all_reduce raised inside torch.distributed, not its own code."""
    failed = [
        TraceFrame("/home/me/job/train.py", 40, "train"),
        TraceFrame("/work/rankscope/src/rankscope/hang/worker_recorder.py", 380, "recorded"),
        TraceFrame(f"{SITE}/torch/distributed/c10d_logger.py", 81, "wrapper"),
        TraceFrame(f"{SITE}/torch/distributed/distributed_c10d.py", 2806, "all_reduce"),
    ]
    assert raised_in_collective(failed, ROOTS)
    assert not raised_in_collective(RAY_TASK, ROOTS)  # json raised under the user's frame
    assert not raised_in_collective(failed[1:], ROOTS)  # no user frame: nothing to be under
    error = task_error(
        exc_type="RuntimeError", message="Connection closed by peer", frames=failed,
        traceback_text="", roots=ROOTS, rank=0, group=None, pid=1, hostname="h", actor=None,
        task="t", thread="MainThread", time=0.0, via="ray_task",
    )  # fmt: skip
    assert error.in_collective and error.where == "train.py:40"


def test_without_a_user_frame_the_innermost_frame_is_kept_and_none_without_frames():
    inside_ray = RAY_TASK[:2]
    assert user_frame(inside_ray, ROOTS) == inside_ray[-1]
    assert user_frame([], ROOTS) is None


def test_a_runners_task_is_named_by_the_users_outermost_function():
    """Ray Train's training thread: no Ray task name; the loop the user handed it names it."""
    frames = [
        TraceFrame(f"{SITE}/ray/train/v2/_internal/execution/thread_runner.py", 40, "_run_target"),
        TraceFrame(f"{SITE}/ray/train/v2/_internal/util.py", 180, "train_fn"),
        TraceFrame("/home/me/job/train.py", 12, "train_loop_per_worker"),
        TraceFrame("/home/me/job/data.py", 92, "load_batch"),
    ]  # fmt: skip
    assert entry_frame(frames, ROOTS) == frames[2] and entry_frame(frames[:2], ROOTS) is None
    common = dict(
        exc_type="ValueError", message="m", frames=frames, traceback_text="", roots=ROOTS,
        rank=0, group=None, pid=1, hostname="h", actor="RayTrainWorker",
        thread="TrainingThread(train_fn)", time=0.0, via="ray_train",
    )  # fmt: skip
    assert task_error(task="", **common).task == "train_loop_per_worker"
    assert task_error(task="Worker.train", **common).task == "Worker.train"
    assert (
        task_error(task="", **{**common, "frames": frames[:2]}).task == "TrainingThread(train_fn)"
    )


def test_text_is_bounded_and_the_traceback_keeps_its_last_lines():
    assert bounded("short") == "short"
    long = bounded("x" * 2000)
    assert len(long) <= MESSAGE_LIMIT and long.endswith("(+1524 chars)")
    text = "".join(f'  File "f{i}.py", line {i}, in f{i}\n' for i in range(500))
    text += "ValueError: bad batch\n"
    kept = tail(text)
    assert len(kept) <= TRACEBACK_LIMIT and kept.startswith("...\n  File")
    assert kept.endswith("ValueError: bad batch\n")
    assert tail("one line") == "one line"


def test_the_record_names_type_message_and_the_users_line_and_crosses_as_json():
    error = task_error(
        exc_type="ValueError", message="bad batch", frames=RAY_TASK,
        traceback_text="Traceback...\nValueError: bad batch\n", roots=ROOTS, rank=3,
        group="10.0.0.1:2900", pid=41, hostname="vm", actor="TrainWorker", task="TrainWorker.train",
        thread="MainThread", time=100.0, via="ray_task",
    )  # fmt: skip
    assert (error.where, error.function, error.path) == (
        "data.py:92",
        "load_batch",
        RAY_TASK[4].path,
    )
    assert error.headline == "rank 3 raised ValueError: bad batch (data.py:92)"
    payload = json.loads(json.dumps(error.to_payload()))
    assert set(payload) == {
        "rank", "group", "pid", "hostname", "actor", "task", "thread", "exc_type", "message",
        "where", "function", "path", "traceback", "time", "via", "echo", "in_collective", "summary",
    }  # fmt: skip
    assert payload["summary"] == error.headline
    assert TaskError.from_payload(payload) == error
    assert TaskError.from_payload({"exc_type": "KeyError", "pid": 7}).who == "pid 7@"


def test_a_rankless_process_and_a_message_on_many_lines_give_one_alert_line():
    error = task_error(
        exc_type="RuntimeError", message="boom\n  at layer 3\n" + "y" * 400, frames=[],
        traceback_text="", roots=ROOTS, rank=None, group=None, pid=9, hostname="h", actor=None,
        task="t", thread="MainThread", time=1.0, via="thread",
    )  # fmt: skip
    assert error.where == "" and error.headline.startswith("pid 9@h raised RuntimeError: boom")
    line = alert_message(error)
    assert line.startswith("pid 9@h raised RuntimeError: boom at layer 3 yyy")
    assert "\n" not in line and len(line) <= 250


def test_asked_for_endings_are_not_errors():
    assert worth_recording("ValueError") and worth_recording("RayTaskError(ValueError)")
    for name in ("KeyboardInterrupt", "SystemExit", "TaskCancelledError", "AsyncioActorExit"):
        assert not worth_recording(name)


def test_one_record_per_type_and_place_per_window_with_a_bounded_memory():
    limit = RateLimit(window_s=5.0, max_keys=2)
    key = ("ValueError", "data.py:92")
    assert limit.allow(key, 0.0)
    assert not limit.allow(key, 4.9)  # the same error again at once: one record
    assert limit.allow(("KeyError", "data.py:92"), 1.0)  # another type is another record
    assert limit.allow(key, 5.0)  # after the window, again
    assert limit.suppressed == 1
    limit.allow(("A", "x:1"), 6.0)
    limit.allow(("B", "x:1"), 6.0)
    assert len(limit._last) == 2  # the oldest forgotten
