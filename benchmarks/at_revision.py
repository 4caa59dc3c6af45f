"""Modules of rankscope as they were at a git revision, imported beside today's: a benchmark
times the code before a change and after it in the same process, trials interleaved."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from types import ModuleType

HERE = os.path.dirname(os.path.abspath(__file__))


def source_at(revision: str, path: str) -> str:
    """The text of `path` (from the repository root) at `revision`."""
    return subprocess.run(
        ["git", "show", f"{revision}:{path}"],
        capture_output=True,
        text=True,
        check=True,
        cwd=HERE,
    ).stdout


def load(name: str, source: str) -> ModuleType:
    """`source` imported as the module `name` (registered, so that others can import it)."""
    path = os.path.join(tempfile.mkdtemp(), f"{name}.py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
