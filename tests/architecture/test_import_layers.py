"""The package's shape: no import cycle of any kind, runtime/ never reaches up into a feature,
no module over 450 lines.

Read with `ast`, not by importing, so a cycle that today's import order happens to survive
still fails here. `import a.b.c` and `from a.b import c` run `a/__init__` and `a/b/__init__`
first, so each counts as an import of those packages too, except of the importer's own
ancestors (already being initialized when the importer runs): a package importing its own
submodules is not a cycle by itself.

Two graphs are checked. The module-level one is what runs at import time. The full one adds
the imports inside functions and under `if TYPE_CHECKING:`: a lazy import saves start-up time
and a `TYPE_CHECKING` import serves mypy, but neither may close a loop, since either way the two
modules still depend on each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = "rankscope"
BASE_LAYERS = {"runtime"}
"""Subpackages below every feature; besides them only top-level modules are base code."""
MAX_MODULE_LINES = 450


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _imported(module: str, path: Path, *, module_level_only: bool) -> set[str]:
    """Every rankscope module this one imports (with the packages that run first)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes: list[ast.AST]
    if module_level_only:
        nodes = []
        stack: list[ast.AST] = list(tree.body)
        while stack:  # module level includes `if`/`try` blocks, not function bodies
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(node, ast.If) and _is_type_checking(node):
                stack.extend(node.orelse)
                continue
            nodes.append(node)
            stack.extend(ast.iter_child_nodes(node))
    else:
        nodes = list(ast.walk(tree))
    known = _modules()
    targets: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, _is_package(path), node)
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    ancestors = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
    if _is_package(path):
        ancestors.add(module)
    found: set[str] = set()
    for target in targets:
        parts = target.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix in known and prefix not in ancestors and prefix != module:
                found.add(prefix)
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _graph(*, module_level_only: bool) -> dict[str, set[str]]:
    return {
        name: _imported(name, path, module_level_only=module_level_only)
        for name, path in _modules().items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules, or None."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def _layer(module: str) -> str:
    """`base` for runtime/ and top-level modules, else the feature (or `cli`) it belongs to."""
    parts = module.split(".")
    if len(parts) == 1:
        return "root"
    if parts[1] in BASE_LAYERS or (SRC / PACKAGE / f"{parts[1]}.py").exists():
        return "base"
    return parts[1]


def test_no_module_level_import_cycle():
    assert find_cycle(_graph(module_level_only=True)) is None


def test_no_import_cycle_of_any_kind():
    """Imports inside functions and under `if TYPE_CHECKING:` count as well."""
    assert find_cycle(_graph(module_level_only=False)) is None


def test_no_import_through_strings():
    """`importlib.import_module("...")` and `__import__` hide an edge from grep, mypy and here."""
    hidden = sorted(
        f"{name}:{node.lineno}"
        for name, path in _modules().items()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path)))
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
            or (isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__"))
        )
    )
    assert hidden == []


def test_base_layers_import_no_feature():
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in _graph(module_level_only=False).items()
        if _layer(module) == "base"
        for target in targets
        if _layer(target) not in ("base", "root")
    )
    assert wrong == []


def test_the_checker_sees_cycles_and_package_submodules():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a.x"}, "a.x": set()}) is None


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from rankscope.hang import model", {"rankscope.hang", "rankscope.hang.model"}),
        ("import rankscope.debug.model", {"rankscope.debug", "rankscope.debug.model"}),
        ("from . import model", {"rankscope.stacks.model"}),
        ("def f():\n    import rankscope.hang\n", set()),
    ],
)
def test_imports_count_the_packages_that_run_first(source: str, expected: set[str], tmp_path):
    path = tmp_path / "probe_module.py"
    path.write_text(source)
    assert _imported("rankscope.stacks.collect", path, module_level_only=True) == expected


@pytest.mark.parametrize(
    ("source", "module_level", "everywhere"),
    [
        ("def f():\n    import rankscope.hang\n", set(), {"rankscope.hang"}),
        (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    from rankscope.hang import model\n",
            set(),
            {"rankscope.hang", "rankscope.hang.model"},
        ),
        (
            "import typing\nif typing.TYPE_CHECKING:\n    import rankscope.debug\n",
            set(),
            {"rankscope.debug"},
        ),
    ],
)
def test_the_full_graph_sees_lazy_and_type_checking_imports(
    source: str, module_level: set[str], everywhere: set[str], tmp_path
):
    path = tmp_path / "probe_module.py"
    path.write_text(source)
    assert _imported("rankscope.stacks.collect", path, module_level_only=True) == module_level
    assert _imported("rankscope.stacks.collect", path, module_level_only=False) == everywhere


def test_no_module_over_450_lines():
    """Past that a module holds several concerns: split it by concern (as memory/analysis/)."""
    long = {
        name: n
        for name, path in _modules().items()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}
