"""Patching a module right after it is imported, so what it defines is wrapped before any user
code can call it, while a process that never imports it pays nothing (torch.distributed for
the collective recorder, Ray Train's runners for the task-error hooks)."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["PatchOnImport", "when_imported"]

Patch = Callable[[ModuleType], None]


def when_imported(patches: dict[str, Patch]) -> None:
    """Run each patch on its module now if it is imported, else right after its import; a
    patch already waiting for its module is not added twice. A failing patch is contained."""
    later = {}
    for name, patch in patches.items():
        module = sys.modules.get(name)
        if module is None:
            later[name] = patch
        else:
            with contextlib.suppress(Exception):
                patch(module)
    waiting = {
        (name, patch)
        for finder in sys.meta_path
        if isinstance(finder, PatchOnImport)
        for name, patch in finder.patches.items()
    }
    later = {name: patch for name, patch in later.items() if (name, patch) not in waiting}
    if later:
        sys.meta_path.insert(0, PatchOnImport(later))


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Runs a patch on a module as soon as it has executed; leaves `sys.meta_path` when done."""

    def __init__(self, patches: dict[str, Patch]) -> None:
        self.patches = dict(patches)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        patch = self.patches.pop(fullname, None)
        if patch is None:
            return None
        if not self.patches:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original_exec = loader.exec_module

        def exec_and_patch(module: ModuleType) -> None:
            original_exec(module)
            with contextlib.suppress(Exception):
                patch(module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec
