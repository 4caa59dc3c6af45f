"""The recorder's hot path: generated wrappers, the lazily read caller line, whole records."""

from __future__ import annotations

import inspect
import sys

import torch
import torch.distributed as dist

from rankscope.hang.model import CallState
from rankscope.hang.worker_callsite import caller_at, line_at
from rankscope.hang.worker_recorder import collective_recorder, record_collectives, stop_recording
from rankscope.hang.worker_wrappers import wrap


def _where() -> tuple[object, int, int]:
    frame = sys._getframe(1)
    return frame.f_code, frame.f_lasti, frame.f_lineno


def test_the_line_read_later_is_the_line_the_frame_gives_now():
    seen = [_where()]
    for i in range(3):
        seen.append(
            _where()  # a call spread over lines
        )
        seen += [_where() for _ in range(i)]
    seen.append(_where() if seen else None)  # type: ignore[arg-type]
    for code, lasti, lineno in seen:
        assert line_at(code, lasti) == lineno  # type: ignore[arg-type]
        assert caller_at(code, lasti) == f"{__file__}:{lineno}"  # type: ignore[arg-type]
    assert caller_at(None, ("t.py", 3)) == "t.py:3"


def test_wrappers_keep_the_signature_and_see_tensors_passed_by_keyword(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rdv", rank=0, world_size=1)
    record_collectives()
    try:
        ours = inspect.signature(dist.all_reduce, follow_wrapped=False).parameters.values()
        torchs = inspect.signature(dist.all_reduce.__wrapped__).parameters.values()
        assert [(p.name, p.default) for p in ours] == [(p.name, p.default) for p in torchs]
        dist.all_reduce(tensor=torch.ones(2, 3))
        dist.broadcast(torch.ones(4, dtype=torch.int32), 0)
        records = collective_recorder().snapshot(last=2).records
    finally:
        stop_recording()
        dist.destroy_process_group()
    assert [(r.op, r.tensors, r.state) for r in records] == [
        ("all_reduce", "float32[2,3]", CallState.COMPLETED),
        ("broadcast", "int32[4]", CallState.COMPLETED),
    ]


def test_an_unusual_signature_gets_the_generic_wrapper_with_the_same_records(tmp_path):
    calls: list[tuple[object, ...]] = []

    def variadic(*args: object, group: object = None, **kwargs: object) -> None:
        calls.append((args, group))

    def shadowing(tensor: torch.Tensor, result: object = None, group: object = None) -> None:
        calls.append((tensor, result, group))

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rdv", rank=0, world_size=1)
    try:
        recorder = collective_recorder()
        first = recorder.total
        wrap("all_reduce", variadic, recorder, False)(torch.ones(5), group=None)
        wrap("all_reduce", shadowing, recorder, False)(torch.ones(6), result=7)
        records = recorder.snapshot(last=recorder.total - first).records
    finally:
        dist.destroy_process_group()
    assert len(calls) == 2 and calls[1][1] == 7  # the function saw its own arguments
    assert [r.tensors for r in records] == ["float32[5]", "float32[6]"]
    assert all(r.caller.startswith(f"{__file__}:") for r in records)


def test_a_collective_that_raises_tells_the_failure_listeners_and_goes_on_raising(tmp_path):
    from rankscope.hang.worker_recorder import failure_listeners

    told: list[int] = []

    def failing(tensor: torch.Tensor, group: object = None) -> None:
        raise RuntimeError("Connection closed by peer")

    failure_listeners.append(lambda: told.append(1))
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rdv", rank=0, world_size=1)
    try:
        recorder = collective_recorder()
        first = recorder.total
        try:
            wrap("all_reduce", failing, recorder, False)(torch.ones(3))
        except RuntimeError as exc:
            raised = str(exc)
        [record] = recorder.snapshot(last=recorder.total - first).records
    finally:
        dist.destroy_process_group()
        failure_listeners.pop()
    assert raised == "Connection closed by peer" and told == [1]
    assert record.state is CallState.FAILED


def test_a_process_that_imports_torch_distributed_later_records_from_its_import():
    """The patch waits on the import (rankscope.import_hooks): no torch at start-up."""
    import subprocess

    code = (
        "import sys; from rankscope.hang import worker_recorder as r; r.record_when_imported(); "
        "r.record_when_imported(); assert 'torch.distributed' not in sys.modules; "
        "import torch.distributed as d; print(bool(r._installed), d.all_reduce.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "all_reduce"]
