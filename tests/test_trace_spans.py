"""The worker side of tracing in this process (no Ray): spans, the ring, step markers,
`debug_decorator`, and the probe's `trace` command start/drain/stop."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch

import rankscope
from rankscope.trace import handler, spans
from rankscope.trace.decorator import arg_repr
from rankscope.trace.model import TraceOptions


@pytest.fixture
def ring():
    spans.stop_recording()
    ring = spans.start_recording(1000)
    yield ring
    spans.stop_recording()


def names(ring: spans.SpanRing) -> list[str]:
    taken, _, _ = ring.take()
    return [s[0] for s in taken]


def test_span_records_nothing_when_off():
    spans.stop_recording()
    with rankscope.span("off"):
        pass
    assert spans.recording() is None


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
    spans.stop_recording()
    ring = spans.start_recording(100)
    try:
        for _ in range(250):
            with rankscope.span("s"):
                pass
        taken, _, dropped = ring.take()
        assert len(taken) == 100 and dropped == 150
    finally:
        spans.stop_recording()


def test_step_markers_and_stop_after_steps():
    spans.stop_recording()
    ring = spans.start_recording(100, steps=3)
    for _ in range(5):
        rankscope.step()
    assert spans.recording() is None  # stopped by itself after 3 steps
    _, steps, _ = ring.take()
    assert len(steps) == 3
    assert [s[1] for s in steps] == sorted(s[1] for s in steps)


class Model:
    @rankscope.debug_decorator(capture_args=True, memory_monitoring=True)
    def forward(self, batch: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        self.kept = [bytearray(8 << 20)]  # 8 MiB that stays: the RSS delta shows it
        return batch * scale


def test_debug_decorator_captures_args_as_shapes_and_memory_delta(ring):
    out = Model().forward(torch.ones(2, 3), scale=2.0)
    assert float(out.sum()) == 12.0
    (name, _, _, _, attrs), *_ = ring.take()[0]
    assert name == "Model.forward"
    assert attrs["args"] == {"batch": "Tensor(float32[2, 3], cpu)", "scale": "2.0"}
    assert attrs["rss_delta_bytes"] >= 4 << 20


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
    spans.stop_recording()
    start = handler.trace_command({"action": "start", "session": "s1", "options": TraceOptions()})
    assert start.spans == () and start.stopped_ns is None

    def work() -> None:
        with rankscope.span("in thread"):
            pass

    thread = threading.Thread(target=work, name="loader")
    thread.start()
    thread.join()
    with rankscope.span("main"):
        rankscope.step()
    chunk = handler.trace_command({"action": "drain", "session": "s1"})
    assert sorted(s[0] for s in chunk.spans) == ["in thread", "main"]
    assert len(chunk.steps) == 1 and chunk.counters[0][1] > 0
    with pytest.raises(RuntimeError, match="already tracing"):
        handler.trace_command({"action": "start", "session": "s2", "options": TraceOptions()})
    last = handler.trace_command({"action": "stop", "session": "s1"})
    assert last.stopped_ns is not None and spans.recording() is None
    with pytest.raises(RuntimeError, match="no trace session"):
        handler.trace_command({"action": "drain", "session": "other"})
