"""A file's name says where it runs (docs/ARCHITECTURE.md, "The shape of a feature").

In a feature package:
- `cli.py`, `collect.py`, `render.py`, `cli_*.py`, `collect_*.py`, `render_*.py`: the CLI process
  only (and what it sends to run on a node for itself, like py-spy); a worker never imports them.
- `worker.py`, `worker_*.py`: inside the ranks' processes (probe commands, recorders, taps, hooks).
- `hub_*.py`: inside the hub actor.
- `api.py`: the feature's public Python API, what `rankscope/__init__.py` re-exports.
- `io_*.py`: I/O shared by more than one of those rooms (a file format, the run directory).
- `model.py`, `analysis.py` and every other plain name: pure, importable anywhere.

Checked here with `ast`, on the full import graph of `test_import_layers` (lazy and
`TYPE_CHECKING` imports count). `runtime/` and the top-level modules are the base every room
stands on and keep their names; `demo/` is a program of its own (a driver with its own ranks)
and is left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

from test_import_layers import PACKAGE, SRC, _graph, _modules

BASE = {f"{PACKAGE}.runtime", f"{PACKAGE}.cli", f"{PACKAGE}.demo"}
"""Packages whose modules are not named by the rule: the base, the CLI's app, the demo."""
CLIENT_SIDE = {f"{PACKAGE}.runtime.client", f"{PACKAGE}.runtime.ask", f"{PACKAGE}.runtime.fan_out"}
"""The CLI's side of the runtime: how it joins a cluster and asks the ranks."""
IMPURE = ("ray", "subprocess", "socket")
REGISTERING = (f"{PACKAGE}.runtime.probe", f"{PACKAGE}.runtime.hub_hooks")
"""Their `register_*` functions put code into a rank's probe or into the hub."""

KNOWN_CROSSINGS = {
    (f"{PACKAGE}.hang.worker_watchdog", f"{PACKAGE}.hang.collect"),
    (f"{PACKAGE}.hang.worker_watchdog", f"{PACKAGE}.runtime.client"),
}
"""The one worker that acts as the CLI: a rank stuck past `hang_timeout` gathers the cluster-wide
hang report itself (lazily, on the watchdog thread), as `rankscope hang` would."""


def _feature_modules() -> dict[str, str]:
    """Every module of a feature package -> its room."""
    rooms: dict[str, str] = {}
    for name, path in _modules().items():
        parts = name.split(".")
        if len(parts) < 3 or ".".join(parts[:2]) in BASE or path.name == "__init__.py":
            continue
        rooms[name] = _room(parts[-1])
    return rooms


def _room(stem: str) -> str:
    if stem in ("cli", "collect", "render") or stem.startswith(("cli_", "collect_", "render_")):
        return "cli"
    if stem == "worker" or stem.startswith("worker_"):
        return "worker"
    if stem.startswith("hub_"):
        return "hub"
    if stem == "api":
        return "api"
    if stem.startswith("io_"):
        return "io"
    return "pure"


def _is_cli(module: str, rooms: dict[str, str]) -> bool:
    return (
        rooms.get(module) == "cli"
        or module == f"{PACKAGE}.cli"
        or module.startswith(f"{PACKAGE}.cli.")
        or module in CLIENT_SIDE
    )


def _third_party(path_module: str) -> set[str]:
    """Top-level names of the non-rankscope modules one module imports, anywhere in it."""
    tree = ast.parse(_modules()[path_module].read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_rule_names_the_rooms():
    assert [_room(s) for s in ("collect_pyspy", "render", "worker", "worker_oom", "hub_death")] == [
        "cli",
        "cli",
        "worker",
        "worker",
        "hub",
    ]
    assert [_room(s) for s in ("api", "io_history", "model", "analysis", "workers")] == [
        "api",
        "io",
        "pure",
        "pure",
        "pure",
    ]


def test_no_worker_hub_or_shared_io_module_imports_the_cli():
    rooms = _feature_modules()
    graph = _graph(module_level_only=False)
    wrong = sorted(
        f"{module} imports {target}"
        for module, room in rooms.items()
        if room in ("worker", "hub", "io")
        for target in graph[module]
        if _is_cli(target, rooms) and (module, target) not in KNOWN_CROSSINGS
    )
    assert wrong == []


def test_an_api_never_imports_the_cli_app_or_its_output():
    """An api may drive a collect as the CLI does (`enable_detailed_tracing` on the driver), but
    never the typer app, its rendering or the `--json` envelope."""
    rooms = _feature_modules()
    graph = _graph(module_level_only=False)
    wrong = sorted(
        f"{module} imports {target}"
        for module, room in rooms.items()
        if room == "api"
        for target in graph[module]
        if target.startswith(f"{PACKAGE}.cli")
        or target.rsplit(".", 1)[-1] in ("cli", "render")
        or target.rsplit(".", 1)[-1].startswith(("cli_", "render_"))
    )
    assert wrong == []


def test_pure_modules_import_no_ray_no_subprocess_no_socket_and_no_other_room():
    """Nor a runtime module that imports one of them (the probe, the hub, the rendezvous)."""
    rooms = _feature_modules()
    graph = _graph(module_level_only=False)
    impure = sorted(
        f"{module} imports {name}"
        for module, room in rooms.items()
        if room == "pure"
        for name in _third_party(module)
        if name in IMPURE
    )
    impure_base = {
        m
        for m in _modules()
        if m.startswith(f"{PACKAGE}.runtime.") and _third_party(m) & set(IMPURE)
    }
    crossing = sorted(
        f"{module} imports {target}"
        for module, room in rooms.items()
        if room == "pure"
        for target in graph[module]
        if rooms.get(target, "pure") != "pure" or target in CLIENT_SIDE or target in impure_base
    )
    assert impure == []
    assert crossing == []


def test_what_rankscope_exports_comes_from_an_api_or_a_model():
    """`rankscope.X` for a feature's X is defined in, or re-exported through, its `api.py` or
    `model.py`; besides them only base modules (`rankscope.context`, `rankscope.level`,
    `rankscope.runtime.api`, the version) export."""
    init = SRC / PACKAGE / "__init__.py"
    wrong = []
    for node in ast.parse(init.read_text()).body:
        if not isinstance(node, ast.ImportFrom) or not node.module:
            continue
        source = node.module
        package = SRC / source.replace(".", "/")
        if not (package / "__init__.py").exists():
            continue  # a module: rankscope.context, rankscope.level, rankscope.runtime.api
        where = _sources(package / "__init__.py")
        for alias in node.names:
            origin = where.get(alias.name, source)
            if origin.rsplit(".", 1)[-1] not in ("api", "model"):
                wrong.append(f"rankscope.{alias.name} comes from {origin}")
    assert wrong == []


def _sources(init_path: Path) -> dict[str, str]:
    """Name -> the module a package's `__init__` imports it from."""
    return {
        alias.asname or alias.name: node.module
        for node in ast.parse(init_path.read_text()).body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


def test_code_registered_into_the_probe_or_the_hub_lives_in_a_worker_or_hub_module():
    rooms = _feature_modules()
    wrong = []
    for module, room in rooms.items():
        tree = ast.parse(_modules()[module].read_text())
        names = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module in REGISTERING
            for alias in node.names
            if alias.name.startswith("register_")
        }
        if names and room not in ("worker", "hub"):
            wrong.append(f"{module} uses {', '.join(sorted(names))}")
    assert wrong == []
