"""The worker side of tracing in this process (no Ray): spans, the ring, step markers,
`debug_decorator`, and the probe's `trace` command start/drain/stop."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace

import pytest
import torch

import rankscope
from rankscope.trace import worker, worker_spans
from rankscope.trace.model import TraceOptions
from rankscope.trace.worker_decorator import arg_repr


@pytest.fixture
def ring():
    worker_spans.stop_recording()
    ring = worker_spans.start_recording(1000)
    yield ring
    worker_spans.stop_recording()


def names(ring: worker_spans.SpanRing) -> list[str]:
    taken, _, _ = ring.take()
    return [s[0] for s in taken]


def test_span_records_nothing_when_off():
    worker_spans.stop_recording()
    with rankscope.span("off"):
        pass
    assert worker_spans.recording() is None


def test_spans_nest_carry_attrs_and_errors(ring):
    with rankscope.span("outer", micro_batch=3), rankscope.span("inner"):
        pass
    with pytest.raises(KeyError), rankscope.span("fails"):
        raise KeyError("x")
    taken, _, dropped = ring.take()
    by_name = {s[0]: s for s in taken}
    outer, inner = by_name["outer"], by_name["inner"]
    assert outer[1] <= inner[1] <= inner[2] <= outer[2]
    assert outer[4] == {"micro_batch": 3} and inner[4] is None
    assert by_name["fails"][4] == {"error": "KeyError"}
    assert dropped == 0 and outer[3] == threading.get_ident()


def test_span_decorates_sync_and_async(ring):
    @rankscope.span("load")
    def load(x: int) -> int:
        return x + 1

    @rankscope.span("fetch")
    async def fetch() -> int:
        await asyncio.sleep(0)
        return 2

    assert load(1) == 2
    assert asyncio.run(fetch()) == 2
    assert names(ring) == ["load", "fetch"]


def test_ring_is_bounded_and_counts_drops():
    worker_spans.stop_recording()
    ring = worker_spans.start_recording(100)
    try:
        for _ in range(250):
            with rankscope.span("s"):
                pass
        taken, _, dropped = ring.take()
        assert len(taken) == 100 and dropped == 150
    finally:
        worker_spans.stop_recording()


def test_step_markers_and_stop_after_steps():
    worker_spans.stop_recording()
    ring = worker_spans.start_recording(100, steps=3)
    for _ in range(5):
        rankscope.step()
    assert worker_spans.recording() is None  # stopped by itself after 3 steps
    _, steps, _ = ring.take()
    assert len(steps) == 3
    assert [s[1] for s in steps] == sorted(s[1] for s in steps)


class Model:
    @rankscope.debug_decorator(capture_args=True, memory_monitoring=True)
    def forward(self, batch: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        # 64 MiB that stays, written: above glibc's largest mmap threshold (32 MiB), so fresh
        # pages a long-lived process cannot hand back from memory it already holds
        self.kept = [bytearray(b"\x01" * (64 << 20))]
        return batch * scale


def test_debug_decorator_captures_args_as_shapes_and_memory_delta(ring):
    out = Model().forward(torch.ones(2, 3), scale=2.0)
    assert float(out.sum()) == 12.0
    (name, _, _, _, attrs), *_ = ring.take()[0]
    assert name == "Model.forward"
    assert attrs["args"] == {"batch": "Tensor(float32[2, 3], cpu)", "scale": "2.0"}
    assert attrs["rss_delta_bytes"] >= 32 << 20


def test_debug_decorator_async_errors_and_sampling(ring):
    @rankscope.debug_decorator(capture_args=True, sample_every=3)
    async def step(i: int) -> int:
        if i == 5:
            raise ValueError("bad batch")
        return i

    for i in range(5):
        assert asyncio.run(step(i)) == i
    with pytest.raises(ValueError):
        asyncio.run(step(5))
    taken, _, _ = ring.take()
    assert len(taken) == 6
    captured = [s[4]["args"]["i"] for s in taken if s[4] and "args" in s[4]]
    assert captured == ["0", "3"]
    assert taken[-1][4]["error"] == "ValueError: bad batch"


def test_bare_debug_decorator_and_bounded_reprs():
    @rankscope.debug_decorator
    def f(x: str) -> int:
        return len(x)

    assert f("abc") == 3
    assert len(arg_repr("x" * 10_000)) == 120
    assert arg_repr(torch.zeros(4, dtype=torch.int64)) == "Tensor(int64[4], cpu)"


def test_trace_command_starts_drains_and_stops():
    worker_spans.stop_recording()
    start = worker.trace_command({"action": "start", "session": "s1", "options": TraceOptions()})
    assert start.spans == () and start.stopped_ns is None

    def work() -> None:
        with rankscope.span("in thread"):
            pass

    thread = threading.Thread(target=work, name="loader")
    thread.start()
    thread.join()
    with rankscope.span("main"):
        rankscope.step()
    chunk = worker.trace_command({"action": "drain", "session": "s1"})
    assert sorted(s[0] for s in chunk.spans) == ["in thread", "main"]
    assert len(chunk.steps) == 1 and chunk.counters[0][1] > 0
    with pytest.raises(RuntimeError, match="already tracing"):
        worker.trace_command({"action": "start", "session": "s2", "options": TraceOptions()})
    last = worker.trace_command({"action": "stop", "session": "s1"})
    assert last.stopped_ns is not None and worker_spans.recording() is None
    with pytest.raises(RuntimeError, match="no trace session"):
        worker.trace_command({"action": "drain", "session": "other"})


def test_a_drain_ships_attribute_reprs_not_tensors():
    worker_spans.stop_recording()
    worker.trace_command({"action": "start", "session": "s3", "options": TraceOptions()})
    with rankscope.span("step", batch=torch.ones(1000, 1000), n=3):
        pass
    chunk = worker.trace_command({"action": "stop", "session": "s3"})
    [(_, _, _, _, attrs)] = chunk.spans
    assert attrs == {"batch": "Tensor(float32[1000, 1000], cpu)", "n": 3}


def test_session_drains_sooner_while_collectives_would_wrap_the_recorders_ring():
    from rankscope.trace.collect import DRAIN_EVERY_S, FASTEST_DRAIN_S, TraceSession

    worker_spans.stop_recording()
    new = {"calls": 0}

    def ask(kind, probes, args):
        chunk = worker.trace_command(args)
        return [(probes[0], replace(chunk, new_collectives=new["calls"]), "")]

    session = TraceSession(ask, [_status()], TraceOptions(), session="s4")
    session.start()
    assert session.interval == DRAIN_EVERY_S
    new["calls"] = 5000  # in one 0.5 s interval: the 2,000-call ring wraps in 0.2 s
    session.drain()
    assert session.interval == FASTEST_DRAIN_S
    new["calls"] = 100
    session.drain()
    assert session.interval == DRAIN_EVERY_S
    session.stop()
    assert len(session.traces()) == 1


def _status():
    from rankscope.context import get_context
    from rankscope.runtime.protocol import ProbeInfo, ProbeState, ProbeStatus, Progress

    info = ProbeInfo("local", get_context(), "0", 0.0)
    return ProbeStatus(info, ProbeState.ALIVE, 0.0, 0.0, Progress(0, 0.0), 0, 0)


def test_torch_profiler_runs_in_the_training_thread_for_the_steps_asked():
    import time

    worker_spans.stop_recording()
    options = TraceOptions(torch_profiler_steps=2)
    start = worker.trace_command({"action": "start", "session": "s5", "options": options})
    a = torch.randn(64, 64)
    for _ in range(4):  # step 1 starts the profiler, 2 more steps stop it
        with rankscope.span("matmul"):
            a = (a @ a).tanh()
        rankscope.step()
    chunk = worker.trace_command({"action": "stop", "session": "s5"})
    torch_spans = [s for s in chunk.spans if s[3] < 0]
    assert any(s[0] == "aten::mm" for s in torch_spans), {s[0] for s in torch_spans}
    assert all(chunk.threads[s[3]].startswith("torch.profiler thread") for s in torch_spans)
    mine = sorted(s[1] for s in chunk.spans if s[0] == "matmul")
    mm = [s for s in torch_spans if s[0] == "aten::mm"]
    assert len(mm) == 2  # two profiled steps, one matmul each
    assert all(mine[1] - 5_000_000 <= s[1] <= time.time_ns() for s in mm)  # same clock
    assert start.started_ns <= min(s[1] for s in mm)


def test_debug_level_full_captures_arguments_and_off_stops_tracing(ring):
    from rankscope import level

    @rankscope.debug_decorator
    def f(x: int) -> int:
        return x

    try:
        level.set_level("full")
        f(7)
        [(_, _, _, _, attrs)] = ring.take()[0]
        assert attrs["args"] == {"x": "7"} and "rss_delta_bytes" in attrs
        worker_spans.stop_recording()
        worker.trace_command({"action": "start", "session": "s6", "options": TraceOptions()})
        level.set_level("off")
        assert worker_spans.recording() is None  # the window stopped with the level
        with pytest.raises(RuntimeError, match="level is off"):
            worker.trace_command({"action": "start", "session": "s7", "options": TraceOptions()})
    finally:
        level.set_level("light")
