"""Every CLI command driven with random arguments (issue 20): never a traceback, never an
internal error; bad input is one line and exit code 2, and a failed command writes nothing.

In process through typer's CliRunner, a bounded number of examples per command, no cluster:
RAY_ADDRESS and every generated --address point at nothing (a closed port, or not HOST:PORT),
so a command that gets as far as connecting fails there in one line, and no other session's
cluster on this machine is ever joined. The command tree is walked at run time, so commands
added later are fuzzed too; `demo` (it starts a cluster of its own) is left out.
"""

from __future__ import annotations

import os
import socket
import struct
import sys

import pytest
import typer.main
import typer.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import rankscope.cli.main as cli

pytestmark = pytest.mark.before_cluster  # in process: no Ray may be initialized here yet

EXAMPLES = int(os.environ.get("RANKSCOPE_FUZZ_EXAMPLES", "20"))
"""Per command; the suite's budget allows 20 (about 2 s per command); raise it locally."""
SKIP = {("demo",)}
"""Starts a Ray cluster of its own (tested in test_demo.py)."""


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


CLOSED = f"127.0.0.1:{_closed_port()}"


def _leaves(command: object, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], object]]:
    subs = getattr(command, "commands", None)
    if subs is None:
        return [(path, command)]
    return [leaf for name, sub in sorted(subs.items()) for leaf in _leaves(sub, (*path, name))]


COMMANDS = [
    (path, command)
    for path, command in _leaves(typer.main.get_command(cli.app))
    if path not in SKIP
]

# ------------------------------------------------------------------ strategies
junk = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=24,
)
addresses = st.one_of(
    st.sampled_from([CLOSED, "nohost", "host:port", ":1", "1.2.3.4", f"ray://{CLOSED}", ""]),
    junk.filter(lambda s: ":" not in s),
)
rank_specs = st.one_of(
    st.sampled_from(["0", "0,3-5", "5-3", "-1", "0,,1", "x", "0-", "99999999999", "1-2-3"]),
    st.from_regex(r"[0-9,\- x]{0,12}", fullmatch=True),
)
numbers = st.one_of(
    st.integers(-(10**9), 10**9).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    junk,
)
durations = st.one_of(
    st.sampled_from(["10s", "1m", "1h30m", "-1s", "0", "0s", "5", "abc", "1e309s", "2d"]), junk
)
regexes = st.one_of(st.sampled_from(["(", "[a-", "*", "a++", ".*", "(?P<x", "\\"]), junk)
words = st.one_of(
    st.sampled_from(["off", "light", "full", "hf-to-mcore", "mcore-to-hf", "llama", "memory"]),
    junk,
)


def _hostile_files(root: str) -> list[str]:
    """Inputs a path option may get: missing, empty, corrupt, a directory, a device."""
    os.makedirs(root, exist_ok=True)
    files = {
        "empty.safetensors": b"",
        "short.safetensors": b"\x05\x00",
        "huge-header.safetensors": struct.pack("<Q", 1 << 60) + b"{}",
        "bad-json.safetensors": struct.pack("<Q", 8) + b"not json",
        "model.bin": b"\x80\x04\x95garbage",
        "config.json": b"{not json",
        "events.jsonl": b'{"kind": 1}\n\xff\xfe\n{',
        "trace.json": b'{"traceEvents": [',
    }
    for name, data in files.items():
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
    os.makedirs(os.path.join(root, "run-dir", "job1"), exist_ok=True)
    with open(os.path.join(root, "run-dir", "job1", "events.jsonl"), "wb") as f:
        f.write(b"\x00\x01garbage\n{")
    names = [os.path.join(root, n) for n in files]
    return [*names, os.path.join(root, "run-dir"), os.path.join(root, "missing"), root, "/dev/null"]


def _strategy(param: object, inputs: list[str], out_dir: str) -> st.SearchStrategy[list[str]]:
    """`[]` (left out) or the arguments for one parameter."""
    name = getattr(param, "name", "") or ""
    opts = getattr(param, "opts", [""])
    flag = bool(getattr(param, "is_flag", False))
    if name in ("follow", "watch", "open_page"):
        return st.just([])  # would wait for more / open a browser: nothing to fuzz
    if flag:
        return st.sampled_from([[], [opts[0]]])
    if name == "address":
        values = addresses
    elif name in ("ranks",):
        values = rank_specs
    elif name in ("duration", "since", "for_"):
        values = durations
    elif name in ("grep",):
        values = regexes
    elif name in ("output", "output_path", "html"):
        values = st.one_of(
            st.sampled_from([os.path.join(out_dir, "o"), os.path.join(out_dir, "x", "y.html")]),
            st.sampled_from(inputs),
        )
    elif name in (
        "path", "expected", "actual", "run_dir", "input_path", "config", "shared_path",
        "runtime_env", "overrides", "model",
    ):  # fmt: skip
        values = st.one_of(st.sampled_from(inputs), junk)
    elif name in (
        "deadline", "min_wait", "limit", "tp", "budget_mb", "gpu_memory", "min_driver", "steps",
        "workers",
    ):  # fmt: skip
        values = numbers
    else:
        values = st.one_of(words, junk)
    if getattr(param, "param_type_name", "") == "argument":
        return values.map(lambda v: ["--", v] if v.startswith("-") else [v])
    return st.one_of(st.just([]), values.map(lambda v: [opts[0], v]))


def _snapshot(root: str) -> set[str]:
    return {os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs} | {
        d for d, _, _ in os.walk(root)
    }


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("fuzz"))
    old_env = {k: os.environ.get(k) for k in ("RAY_ADDRESS",)}
    os.environ["RAY_ADDRESS"] = CLOSED
    old_cwd = os.getcwd()
    os.chdir(root)
    # typer's CliRunner builds the whole command tree on every call (~0.1 s): build it once
    get_command = typer.testing._get_command
    built = typer.main.get_command(cli.app)
    typer.testing._get_command = lambda app: built if app is cli.app else get_command(app)
    try:
        yield root, _hostile_files(os.path.join(root, "in")), os.path.join(root, "out")
    finally:
        typer.testing._get_command = get_command
        os.chdir(old_cwd)
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_random_arguments_never_crash(sandbox, path, command):
    root, inputs, out_dir = sandbox
    params = [p for p in command.params if getattr(p, "name", "") != "help"]  # type: ignore[attr-defined]
    runner = CliRunner()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(st.tuples(*(_strategy(p, inputs, out_dir) for p in params)))
    def run(parts: tuple[list[str], ...]) -> None:
        args = [*path, *(a for part in parts for a in part)]
        before = _snapshot(root)
        result = runner.invoke(cli.app, args)
        shown = f"rankscope {' '.join(map(repr, args))}\n{result.output}"
        assert result.exit_code in (0, 1, 2), shown
        assert result.exception is None or isinstance(result.exception, SystemExit), shown
        assert "Traceback" not in result.output, shown
        if result.exit_code == 2:
            lines = result.stderr.strip("\n").split("\n")  # terminal lines (a path may hold \x1e)
            assert len(lines) == 1 and lines[0].startswith("rankscope: error: "), shown
        if result.exit_code != 0:
            assert _snapshot(root) == before, f"{shown}\nwrote files on failure"
        assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized(), shown

    run()


# ------------------------------------------- numbers out of range, named before anything runs
REQUIRED = {
    "direction": "hf-to-mcore",
    "src": "in/model",
    "dst": "out/model",
    "expected": "in/a",
    "actual": "in/b",
    "path": "in/a",
    "session_id": "s1",
    "workers": "2",
    "new_level": "light",
}
"""Values for required arguments, so a bad number is what the command stops at."""
NUMBERS = [
    (path, command, param, bad)
    for path, command in COMMANDS
    for param in command.params  # type: ignore[attr-defined]
    if type(param.default) in (int, float)
    for bad in (("-1", "nan", "inf") if isinstance(param.default, float) else ("-1",))
]


@pytest.mark.parametrize(
    ("path", "command", "param", "bad"),
    NUMBERS,
    ids=[f"{' '.join(p)} {param.opts[0]} {bad}" for p, _, param, bad in NUMBERS],
)
def test_a_number_out_of_range_is_named_before_anything_connects(
    sandbox, path, command, param, bad
):
    """Every count, size and duration is finite and not negative: a bad one is refused in
    one line naming the option, before the command reaches for a cluster or a file."""
    required = [REQUIRED[p.name] for p in command.params if p.required and p.name != param.name]
    args = [*path, *required, param.opts[0], bad]
    result = CliRunner().invoke(cli.app, args)
    shown = f"rankscope {' '.join(args)}\n{result.output}"
    assert result.exit_code == 2, shown
    lines = result.stderr.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("rankscope: error: "), shown
    assert param.opts[0] in lines[0], shown
