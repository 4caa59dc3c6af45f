"""Every command's `--json` is `to_json` of a model: a dataclass (or a list of them), never a
dict put together in the command; and the JSON of the models that replaced hand-built dicts
keeps its keys (`status`, `diagnose`, `debug list`, `ckpt diff`, `diagnose --mode
memory_profile`)."""

from __future__ import annotations

import ast
import dataclasses
import json
import pathlib

import pytest
import typer.main

import rankscope
import rankscope.cli.main as cli
from rankscope.alerts.model import JobAlerts
from rankscope.ckpt.model import CkptDiff, Inspection
from rankscope.ckpt.schemes import detect_scheme
from rankscope.cli.output import is_model, to_json
from rankscope.debug.analysis import PortCheck
from rankscope.debug.model import AttachCommands, AttachRoute, DebugList, SessionListing
from rankscope.doctor.config_lint.model import LintReport
from rankscope.doctor.model import EnvironmentDiagnosis, JobEnvironment
from rankscope.doctor.preflight.model import PreflightReport
from rankscope.events.model import EventsReport, JobEvents
from rankscope.hang.model import HangReport
from rankscope.levels.model import RankLevel
from rankscope.logs.model import JobLogs
from rankscope.memory.analysis import ClusterMemory
from rankscope.memory.collect_by_gpu import JobGpus
from rankscope.memory.collect_profile import MemoryProfile, MemoryProfileFiles
from rankscope.monitor.comm import CommBench
from rankscope.monitor.model import JobHealth, JobTop
from rankscope.report.model import RunReport
from rankscope.resources.model import AllocationPlan, PendingReport
from rankscope.stacks.model import StackReport
from rankscope.status.model import JobStatusView, StatusReport
from rankscope.trace.model import TraceSummary

MODELS: dict[str, tuple[type, ...]] = {
    "stacks": (StackReport,),
    "hang": (HangReport,),
    "status": (StatusReport,),
    "events": (EventsReport,),
    "diagnose": (EnvironmentDiagnosis, PortCheck, MemoryProfile),
    "doctor": (PreflightReport, LintReport),
    "memory": (ClusterMemory, JobGpus),
    "why-pending": (PendingReport,),
    "plan": (AllocationPlan,),
    "monitor": (JobHealth,),
    "top": (JobTop,),
    "comm-bench": (CommBench,),
    "logs": (JobLogs,),
    "alerts": (JobAlerts,),
    "level": (RankLevel,),
    "report": (RunReport,),
    "trace": (TraceSummary,),
    "ckpt inspect": (Inspection,),
    "ckpt diff": (CkptDiff,),
    "ckpt convert": (),  # filled below: ckpt.convert imports torch lazily
    "debug list": (DebugList,),
}
"""Every command with `--json`, and the model types it prints (a new one must name its own)."""

SRC = pathlib.Path(rankscope.__file__).parent


def _json_commands(group: object, prefix: str = "") -> list[str]:
    found = []
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        if hasattr(command, "commands"):
            found += _json_commands(command, f"{prefix}{name} ")
        elif any("--json" in p.opts for p in command.params):
            found.append(prefix + name)
    return found


def test_every_command_with_json_names_the_models_it_prints():
    assert sorted(_json_commands(typer.main.get_command(cli.app))) == sorted(MODELS)
    from rankscope.ckpt.convert import ConvertResult

    for types in [*MODELS.values(), (ConvertResult,)]:
        assert all(dataclasses.is_dataclass(t) for t in types), types


def test_no_json_is_put_together_by_hand():
    """`to_json`'s data is never a dict display or comprehension, anywhere in the package."""
    hand_built = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", "")) == "to_json"
                and len(node.args) == 2
                and isinstance(node.args[1], ast.Dict | ast.DictComp)
            ):
                hand_built.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert hand_built == []


@pytest.mark.parametrize("data", [{"a": 1}, [{"a": 1}], "text", None, [1, 2]])
def test_to_json_refuses_what_is_not_a_model(data):
    assert not is_model(data)
    with pytest.raises(TypeError, match="not a model"):
        to_json("status", data)


def _data(command: str, model: object) -> object:
    doc = json.loads(to_json(command, model))
    assert doc["schema_version"] == 1 and doc["command"] == command
    return doc["data"]


def test_status_and_diagnose_are_keyed_by_job_with_their_keys():
    view = JobStatusView("01000000", (), {"p1": "killed"}, "rank 1 died first", ("a",), ())
    assert _data("status", StatusReport((view,))) == {
        "01000000": {
            "processes": [],
            "deaths": {"p1": "killed"},
            "first_death": "rank 1 died first",
            "alerts": ["a"],
            "active_alerts": [],
        }
    }
    env = JobEnvironment("02000000", [], [], ["rank 3"])
    diagnosis = EnvironmentDiagnosis((env,), saved=("/run/02000000/diagnose.json",))
    assert _data("diagnose", diagnosis) == {
        "02000000": {"processes": [], "findings": [], "unanswered": ["rank 3"]}
    }


def test_debug_list_says_how_to_attach_without_the_routes():
    attach = AttachCommands("rankscope debug attach s1", True, "run on node 10.0.0.2", None)
    route = AttachRoute(True, "127.0.0.1", 4000, "run on node 10.0.0.2")
    listing = SessionListing("01000000", (), (), (), ())
    data = _data("debug-list", DebugList((listing,), {"s1": attach}, {"s1": route}))
    assert set(data) == {"jobs", "attach"}  # type: ignore[arg-type]
    assert data["attach"]["s1"] == {  # type: ignore[index]
        "command": "rankscope debug attach s1",
        "tunnel": True,
        "direct": "run on node 10.0.0.2",
        "vscode": None,
    }


def test_ckpt_diff_keeps_matches():
    scheme = detect_scheme(["model.embed_tokens.weight"])
    same = CkptDiff("a", "b", scheme, scheme, 1, [], [], [], [], [])
    assert _data("ckpt.diff", same)["matches"] is True  # type: ignore[index]


def test_memory_profile_prints_files_and_memory():
    memory = ClusterMemory("01000000", ())
    files = MemoryProfileFiles("01000000", "/run/a.json", "/run/a.html")
    [entry] = _data("diagnose.memory_profile", [MemoryProfile(files, memory)])  # type: ignore[misc]
    assert set(entry) == {"files", "memory"}
    assert entry["files"]["json_path"] == "/run/a.json"


def test_events_are_a_list_per_job():
    report = EventsReport((JobEvents("01000000", ({"kind": "x", "who": "rank 0"},)),))
    assert _data("events", report) == {"01000000": [{"kind": "x", "who": "rank 0"}]}
