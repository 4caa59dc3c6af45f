"""`rankscope diagnose`: environments compared across ranks."""

from __future__ import annotations

import dataclasses
import json
import os

import ray
from rich.console import Console
from typer.testing import CliRunner

import rankscope.cli.main as cli
from helpers.cluster import wait_registered
from helpers.workers import GlooRank
from rankscope.doctor import collect_facts
from rankscope.doctor.analysis import compare_environments, ordered
from rankscope.doctor.model import JobEnvironment, ProcessFacts
from rankscope.doctor.render import render_environment

TORCH = {"torch": "2.13.0", "cuda": None, "nccl": None}
"""What a rank that imported a CPU build of torch reports."""
NO_TORCH = {"torch": None, "cuda": None, "nccl": None}
"""What a process that never imported torch reports."""


def _facts(label: str, *, variables: dict[str, str] | None = None, **changes):
    """A process as its probe reports it; `rank N` labels have rank N, others have none."""
    rank = int(label.split()[1]) if label.startswith("rank ") else None
    group = changes.pop("group", "10.0.0.1:29500" if rank is not None else None)
    host = changes.pop("host", "host-a")
    facts = dataclasses.replace(
        collect_facts(), **{**TORCH, "shm_total_bytes": 16 << 30, **changes}
    )
    if variables is not None:
        facts = dataclasses.replace(facts, variables=variables)
    return ProcessFacts(label, host, facts, rank, group)


def _ray_train_job(changes: dict[int, dict] | None = None):
    """4 ranks as Ray Train starts them, and its TrainController: a healthy single-venv job.

    `changes` by rank: facts to replace, `variables` to set on top of the usual ones.
    """
    ranks = []
    for r in range(4):
        change = dict((changes or {}).get(r, {}))
        variables = {
            "CUDA_VISIBLE_DEVICES": str(r),  # Ray sets it per GPU actor, by design
            "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "29500",
            "WORLD_SIZE": "4",
            "NCCL_SOCKET_IFNAME": "eth0",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
            **change.pop("variables", {}),
        }
        ranks.append(_facts(f"rank {r}", variables=variables, **change))
    controller = _facts(
        "pid 25748@vm",
        variables={"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"},
        **NO_TORCH,
    )
    return [controller, *ranks]


def test_same_environment_everywhere_has_no_finding():
    assert compare_environments([_facts(f"rank {r}") for r in range(4)]) == []


def test_a_healthy_ray_train_job_with_its_controller_has_no_finding():
    assert compare_environments(_ray_train_job()) == []


def test_processes_without_a_rank_are_never_compared():
    driver_side = [
        _facts("pid 1@vm", variables={"MASTER_PORT": "1", "NCCL_DEBUG": "INFO"}, **NO_TORCH),
        _facts("pid 2@vm", variables={"WORLD_SIZE": "8"}, torch="2.9.1"),
    ]
    assert compare_environments([*driver_side, *_ray_train_job()]) == []


def test_per_process_variables_are_not_compared_between_ranks():
    job = _ray_train_job(
        {2: {"variables": {"CUDA_VISIBLE_DEVICES": "0", "MASTER_PORT": "41000", "RANK": "2"}}}
    )
    assert compare_environments(job) == []


def test_an_nccl_variable_set_on_some_ranks_only_is_named():
    job = _ray_train_job({3: {"variables": {"NCCL_DEBUG": "INFO"}}})
    [finding] = compare_environments(job)
    assert finding.what == "NCCL_DEBUG" and finding.odd_ones == ("rank 3",)
    assert "rank 3 has INFO where most have (unset)" in finding.message


def test_torch_is_compared_only_between_ranks_that_imported_it():
    job = _ray_train_job({3: NO_TORCH})
    assert compare_environments(job) == []


def test_the_rank_with_another_torch_is_named():
    ranks = [_facts(f"rank {r}", torch="2.13.0" if r != 2 else "2.9.1") for r in range(4)]
    [finding] = compare_environments(ranks)
    assert finding.what == "torch" and finding.odd_ones == ("rank 2",)
    assert "rank 2 has 2.9.1 where most have 2.13.0" in finding.message


def test_a_cpu_torch_among_cuda_builds_is_named():
    job = _ray_train_job({r: {"cuda": "12.8"} for r in (0, 1, 3)})
    [finding] = compare_environments(job)
    assert finding.what == "cuda" and finding.odd_ones == ("rank 2",)


def test_an_nccl_variable_that_differs_between_ranks_is_named():
    job = _ray_train_job({1: {"variables": {"NCCL_SOCKET_IFNAME": "ib0"}}})
    [finding] = compare_environments(job)
    assert finding.what == "NCCL_SOCKET_IFNAME" and finding.odd_ones == ("rank 1",)
    assert finding.message == (
        "NCCL_SOCKET_IFNAME differs across ranks (eth0 on 3, ib0 on 1); "
        "rank 1 has ib0 where most have eth0"
    )


def test_ranks_compare_within_their_group():
    """verl runs several worker groups in one job, each with ranks 0..N-1."""
    actor = [_facts(f"rank {r}", group="10.0.0.1:29500") for r in range(2)]
    critic = [_facts(f"rank {r}", group="10.0.0.1:29600", torch="2.9.1") for r in range(2)]
    assert compare_environments([*actor, *critic]) == []  # each group agrees with itself

    critic[1] = _facts("rank 1", group="10.0.0.1:29600", torch="2.13.0")
    [finding] = compare_environments([*actor, *critic])
    assert finding.group == "10.0.0.1:29600"
    assert finding.message.startswith("torch differs across ranks of group 10.0.0.1:29600")


def test_small_dev_shm_is_a_finding():
    [finding] = compare_environments([_facts("rank 0", shm_total_bytes=64 << 20)])
    assert "/dev/shm is 64 MiB on host-a" in finding.message and "--shm-size" in finding.message


def test_processes_without_a_rank_are_listed_after_the_ranks():
    job = ordered(_ray_train_job())
    assert [p.label for p in job] == ["rank 0", "rank 1", "rank 2", "rank 3", "pid 25748@vm"]


def _render(processes: list[ProcessFacts], unanswered: tuple[str, ...] = ()) -> list[str]:
    fixed = {"python": "3.11.7", "ray": "2.60.0", "rankscope": "0.1.0"}
    processes = ordered(
        [dataclasses.replace(p, facts=dataclasses.replace(p.facts, **fixed)) for p in processes]
    )
    env = JobEnvironment("02000000", processes, compare_environments(processes), [*unanswered])
    console = Console(width=80, record=True, color_system=None)
    console.print(render_environment(env))
    return [line.rstrip() for line in console.export_text().splitlines()]


def test_rendered_environment_golden():
    assert _render(_ray_train_job()) == [
        "job 02000000: environment of 5 processes",
        "┌──────────┬───────────────────────────────────────────────────────────────────┐",
        "│ ranks    │ 0-3                                                               │",
        "│ no rank  │ pid 25748@vm (listed, not compared)                               │",
        "│ versions │ python 3.11.7, ray 2.60.0, rankscope 0.1.0, torch 2.13.0 (no      │",
        "│          │ CUDA)                                                             │",
        "│ ok       │ versions, NCCL/torch variables and /dev/shm agree                 │",
        "└──────────┴───────────────────────────────────────────────────────────────────┘",
    ]


def test_rendered_environment_golden_with_a_finding():
    job = _ray_train_job({1: {"variables": {"NCCL_SOCKET_IFNAME": "ib0"}}})
    assert _render(job, ("rank 4",))[1:] == [
        "┌────────────────────┬─────────────────────────────────────────────────────────┐",
        "│ ranks              │ 0-3                                                     │",
        "│ no rank            │ pid 25748@vm (listed, not compared)                     │",
        "│ versions           │ python 3.11.7, ray 2.60.0, rankscope 0.1.0, torch       │",
        "│                    │ 2.13.0 (no CUDA)                                        │",
        "│ NCCL_SOCKET_IFNAME │ NCCL_SOCKET_IFNAME differs across ranks (eth0 on 3, ib0 │",
        "│                    │ on 1); rank 1 has ib0 where most have eth0              │",
        "│ no answer          │ rank 4                                                  │",
        "└────────────────────┴─────────────────────────────────────────────────────────┘",
    ]


def test_diagnose_names_the_rank_whose_nccl_variable_differs(cluster):
    actor = ray.remote(num_cpus=0)(GlooRank)
    ranks = [
        actor.options(
            runtime_env={
                "env_vars": {
                    "NCCL_SOCKET_IFNAME": "eth9" if r == 2 else "eth0",
                    "CUDA_VISIBLE_DEVICES": str(r),  # differs by design: never a finding
                }
            }
        ).remote(r + 10, 3, explicit_rank=True)
        for r in range(3)
    ]
    # a process without a rank (a controller): other variables, never compared
    controller = actor.options(
        runtime_env={"env_vars": {"NCCL_SOCKET_IFNAME": "lo", "MASTER_PORT": "29999"}}
    ).remote(0, 1)
    everyone = [*ranks, controller]
    pids = ray.get([a.pid.remote() for a in everyone])
    wait_registered(pids)

    result = CliRunner().invoke(cli.app, ["diagnose", "--json"])

    for a in everyone:
        ray.kill(a)
    assert result.exit_code == 1, result.output
    data = json.loads(result.output)["data"]
    [job] = [job for job in data.values() if {p["label"] for p in job["processes"]} >= {"rank 10"}]
    assert [(f["what"], f["odd_ones"]) for f in job["findings"]] == [
        ("NCCL_SOCKET_IFNAME", ["rank 12"])
    ]
    labels = [p["label"] for p in job["processes"]]
    assert labels[:3] == ["rank 10", "rank 11", "rank 12"]
    assert f"pid {pids[3]}@" in labels[3]  # after the ranks

    # saved through the hub into the job's run directory: the report has it after the job
    from rankscope.report.collect import collect_run
    from rankscope.report.environment import environment_section

    [job_id] = [j for j, env in data.items() if env is job]
    job_dir = os.path.join(os.environ["RANKSCOPE_RUN_DIR"], job_id)
    assert os.stat(os.path.join(job_dir, "diagnose.json")).st_mode & 0o777 == 0o600
    section = environment_section(collect_run(job_dir, None, None), 0.0)
    assert section is not None
    assert section.summary.startswith("diagnose.json: ")
    assert any("NCCL_SOCKET_IFNAME" in f for f in section.findings)


def test_facts_never_initialize_cuda_in_a_process_that_did_not():
    """A CUDA context costs ~500 MB of device memory per process on a GPU node."""
    import torch

    from rankscope.doctor import collect_facts

    before = torch.cuda.is_initialized()
    facts = collect_facts()
    assert torch.cuda.is_initialized() == before
    assert facts.torch == torch.__version__


def test_the_facts_cross_as_plain_values_so_the_cli_never_imports_torch_to_read_them():
    import pickle

    import torch  # noqa: F401  (the job imported it)

    from rankscope.doctor.worker import collect_facts

    facts = collect_facts()
    assert type(facts.torch) is str
    assert b"torch.torch_version" not in pickle.dumps(facts)
