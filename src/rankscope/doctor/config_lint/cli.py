"""`rankscope doctor --config FILE [key=value ...]`: load, lint, estimate, render, exit code."""

from __future__ import annotations

import os

from rich.console import Console

from rankscope.cli.common import ExitCode
from rankscope.doctor.config_lint.load import load_config, load_model_shape, plan_from_config
from rankscope.doctor.config_lint.memory import estimate
from rankscope.doctor.config_lint.model import ClusterShape, LintReport
from rankscope.doctor.config_lint.rules import LintContext, run_rules
from rankscope.errors import UserError

__all__ = ["lint", "lint_command"]

GIB = 1 << 30


def lint(
    config: str,
    overrides: list[str],
    *,
    model: str | None = None,
    gpu_memory_gib: float | None = None,
    cluster: ClusterShape | None = None,
) -> LintReport:
    """The lint report of a config file (pure apart from reading the files)."""
    if gpu_memory_gib is not None and gpu_memory_gib <= 0:
        raise UserError(f"--gpu-memory {gpu_memory_gib}: must be > 0 GiB")
    plan = plan_from_config(load_config(config, overrides))
    shape = load_model_shape(model or plan.model_path, explicit=model is not None)
    device = gpu_memory_gib * GIB if gpu_memory_gib else None
    if device is None and cluster is not None:
        device = cluster.gpu_memory_bytes
    ctx = LintContext(model=shape, cluster=cluster, device_bytes=device)
    memory = None if shape is None else estimate(plan, shape, device)
    return LintReport(config, tuple(run_rules(plan, ctx)), memory, shape, plan)


def _absolute(path: str | None) -> str | None:
    """A checkpoint dir the nodes can be asked about: a local absolute path (`~`, `$VAR` too)."""
    return path if path and path.startswith(("/", "~", "$")) else None


def lint_command(
    config: str,
    overrides: list[str],
    *,
    model: str | None,
    gpu_memory_gib: float | None,
    address: str | None,
    as_json: bool,
    html: str | None,
    console: Console,
) -> int:
    from rankscope.cli.output import to_json
    from rankscope.doctor.config_lint.render import render_html, render_lint
    from rankscope.doctor.preflight.cli import write_text

    cluster = None
    if address or os.environ.get("RAY_ADDRESS"):
        from rankscope.doctor.config_lint.collect import cluster_shape

        plan = plan_from_config(load_config(config, overrides))
        cluster = cluster_shape(address, _absolute(plan.checkpoint_dir))
    report = lint(config, overrides, model=model, gpu_memory_gib=gpu_memory_gib, cluster=cluster)
    if html:
        write_text(html, render_html(report))
    if as_json:
        console.print_json(to_json("doctor", report))
    else:
        console.print(render_lint(report))
    return ExitCode.FINDING if report.failed else ExitCode.OK
