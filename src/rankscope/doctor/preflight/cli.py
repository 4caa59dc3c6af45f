"""`rankscope doctor` without --config: parse, collect, check, render, exit code."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from rich.console import Console

from rankscope.cli.common import ExitCode
from rankscope.errors import UserError

__all__ = ["load_runtime_env", "preflight_command"]


def preflight_command(
    *,
    address: str | None,
    shared_path: str | None,
    runtime_env: str | None,
    deadline: float,
    min_driver: str,
    as_json: bool,
    html: str | None,
    console: Console,
) -> int:
    from rankscope.cli.output import to_json
    from rankscope.doctor.preflight.collect import PreflightOptions, preflight
    from rankscope.doctor.preflight.render import render_html, render_preflight

    options = PreflightOptions(
        address=address,
        shared_path=shared_path,
        runtime_env=load_runtime_env(runtime_env) if runtime_env else None,
        runtime_env_file=runtime_env,
        deadline_s=deadline,
        min_driver=min_driver,
    )
    report = preflight(options)
    if html:
        write_text(html, render_html(report))
    if as_json:
        console.print_json(to_json("doctor", report))
    else:
        console.print(render_preflight(report))
    failed = report.failed or bool(report.unanswered)
    return ExitCode.FINDING if failed else ExitCode.OK


def load_runtime_env(path: str) -> dict[str, Any]:
    """A runtime_env from a YAML or JSON file; a mapping, else one line and exit 2."""
    import yaml

    try:
        text = pathlib.Path(path).read_text()
    except OSError as exc:
        raise UserError(f"--runtime-env {path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise UserError(f"--runtime-env {path}: not a text file (YAML or JSON)") from None
    try:
        data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"--runtime-env {path}: not valid YAML/JSON ({first})") from None
    if not isinstance(data, dict):
        raise UserError(f"--runtime-env {path}: must be a mapping such as `pip: [vllm==0.8.5]`")
    return data


def write_text(path: str, text: str) -> None:
    try:
        pathlib.Path(path).write_text(text)
    except OSError as exc:
        raise UserError(f"--html {path}: cannot write it ({exc.strerror})") from None
