"""A command's reply and a heartbeat's summaries cross the relay and the hub as bytes,
unpickled only by their reader; the records they carry cross whole."""

from __future__ import annotations

import io
import pickle
from dataclasses import replace

import ray.cloudpickle

from rankscope.context import RankContext
from rankscope.hang.model import CallState, CollectiveRecord
from rankscope.runtime.protocol import (
    CommandResult,
    PollRequest,
    ProbeInfo,
    ProbeRows,
    ProbeState,
    ProbeStatus,
    Progress,
    Summaries,
)
from rankscope.stacks.model import Frame

UNPICKLED: list[str] = []


class Payload:
    """Counts how often it is unpickled."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __setstate__(self, state: dict[str, str]) -> None:
        UNPICKLED.append(state["name"])
        self.__dict__.update(state)


def test_the_relay_and_the_hub_pass_a_payload_on_without_unpickling_it():
    UNPICKLED.clear()
    sent = CommandResult("p0", True, Payload("stacks"))
    at_relay = ray.cloudpickle.loads(ray.cloudpickle.dumps(sent))  # as Ray pickles arguments
    at_hub = ray.cloudpickle.loads(ray.cloudpickle.dumps(at_relay))
    at_cli = ray.cloudpickle.loads(ray.cloudpickle.dumps(at_hub))
    assert UNPICKLED == []
    assert (at_cli.probe_id, at_cli.ok, at_cli.payload.name) == ("p0", True, "stacks")
    assert UNPICKLED == ["stacks"]
    assert at_cli.payload is at_cli.payload  # once


def test_a_payload_plain_pickle_refuses_still_crosses_as_ray_pickles_it():
    sent = CommandResult("p1", True, lambda: 42)
    assert ray.cloudpickle.loads(ray.cloudpickle.dumps(sent)).payload() == 42


def test_an_answer_says_how_far_its_rank_got_as_it_answered():
    sent = CommandResult("p3", True, Payload("stacks"), progress=Progress(41, 100.0),
                         answered_at=100.5)  # fmt: skip
    at_cli = ray.cloudpickle.loads(ray.cloudpickle.dumps(sent))
    assert (at_cli.progress, at_cli.answered_at) == (Progress(41, 100.0), 100.5)

    again = sent.answered(Progress(42, 101.0), 101.2)  # a repeated answer, its bytes shared
    assert again._packed is sent._packed and again.payload is sent.payload
    at_cli = pickle.loads(pickle.dumps(again))
    assert (at_cli.progress, at_cli.answered_at, at_cli.payload.name) == (
        Progress(42, 101.0),
        101.2,
        "stacks",
    )


def test_registry_rows_cross_as_one_plain_pickle():
    """Ray pickles an actor method's result with cloudpickle, whose hook runs per object: the
    hub's rows go through it as one list of bytes, not as thousands of rows."""
    seen: list[str] = []

    class Counting(ray.cloudpickle.cloudpickle.Pickler):
        def reducer_override(self, obj):
            seen.append(type(obj).__name__)
            return super().reducer_override(obj)

    context = RankContext(0, 0, 2, "node", "10.0.0.1", "host", 7, "j", None, None, None, "env")
    info = ProbeInfo("p0", context, "0", 1.0)
    rows = ProbeRows(
        ProbeStatus(replace(info, probe_id=f"p{r}"), ProbeState.ALIVE, 1.0, 2.0,
                    Progress(r, 3.0, 2.5), 0, 0)
        for r in range(100)
    )  # fmt: skip
    sent = io.BytesIO()
    Counting(sent, protocol=5).dump(rows)

    assert "ProbeStatus" not in seen and len(seen) < 5, seen
    assert pickle.loads(sent.getvalue()) == list(rows)


def test_results_compare_by_what_they_say():
    failed = CommandResult("p2", False, error="unknown command x")
    assert pickle.loads(pickle.dumps(failed)) == failed
    assert failed != CommandResult("p2", False, error="another")
    assert "unknown command x" in repr(failed)


def test_the_hub_keeps_and_passes_on_summaries_without_unpickling_them():
    UNPICKLED.clear()
    beat = PollRequest("p0", Progress(1, 0.0), summaries=Summaries({"collectives": Payload("c")}))
    at_relay = ray.cloudpickle.loads(ray.cloudpickle.dumps(beat))
    at_hub = ray.cloudpickle.loads(ray.cloudpickle.dumps(at_relay))
    row = at_hub.summaries.only(["collectives", "where"])  # as `Hub.list_probes` filters them
    at_cli = ray.cloudpickle.loads(ray.cloudpickle.dumps(row))
    assert UNPICKLED == []
    assert list(at_cli) == ["collectives"] and len(at_cli) == 1 and "where" not in at_cli
    assert at_cli["collectives"].name == "c" and at_cli.get("where") is None
    assert UNPICKLED == ["c"]
    assert at_cli["collectives"] is at_cli["collectives"]  # once
    assert at_hub.summaries.only(["where"]) == {}


def test_summaries_plain_pickle_refuses_still_cross_and_compare_as_dicts():
    sent = Summaries({"later": lambda: 42, "where": "train.py:3"})
    got = ray.cloudpickle.loads(ray.cloudpickle.dumps(sent))
    assert got["later"]() == 42 and got["where"] == "train.py:3"
    assert Summaries({"where": "a"}) == {"where": "a"} != Summaries({"where": "b"})
    assert "train.py:3" in repr(got)


def test_records_and_frames_cross_whole_and_frames_are_built_once():
    record = CollectiveRecord(
        "0", 7, "all_reduce", ((4, 2),), ("float32",), 1.5, None, CallState.STARTED, "t.py:3",
        error="x", source="torch flight recorder",
    )  # fmt: skip
    back = ray.cloudpickle.loads(ray.cloudpickle.dumps(record))
    assert back == record and back.state is CallState.STARTED and back.signature == record.signature
    frame = Frame("step", "/job/train.py", 41, False)
    first, second = (pickle.loads(pickle.dumps((frame,))) for _ in range(2))
    assert first == (frame,) and first[0] is second[0]  # 4,096 ranks' stacks share their frames


def test_summaries_over_the_budget_lose_the_biggest_first_and_keep_the_others_packed():
    from rankscope.runtime.probe import within_budget

    summaries = Summaries({"big": "x" * 3000, "bigger": "y" * 5000, "small": {"a": 1}})
    assert summaries.sizes()["bigger"] > 5000 and summaries.sizes()["small"] < 100
    kept, dropped = within_budget(summaries, 4096)
    assert [name for name, _ in dropped] == ["bigger"]  # the biggest alone brings it under
    assert sum(kept.sizes().values()) <= 4096
    assert kept["big"] == "x" * 3000 and kept["small"] == {"a": 1}
    assert "over the heartbeat budget: 5" in kept["bigger"]["error"]
    assert pickle.loads(pickle.dumps(kept)) == kept

    kept, dropped = within_budget(summaries, 1000)
    assert [name for name, _ in dropped] == ["bigger", "big"]
    assert kept["small"] == {"a": 1}

    assert within_budget(summaries, 10_000) == (summaries, [])
