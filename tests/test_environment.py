"""`rankscope diagnose`: environments compared across ranks."""

from __future__ import annotations

import json

import ray
from typer.testing import CliRunner

import rankscope.cli.main as cli
from helpers import wait_registered
from rankscope.doctor import collect_facts
from rankscope.doctor.analysis import compare_environments
from rankscope.doctor.model import ProcessFacts
from workers import GlooRank


def _facts(label: str, **changes):
    import dataclasses

    return ProcessFacts(label, "host-a", dataclasses.replace(collect_facts(), **changes))


def test_same_environment_everywhere_has_no_finding():
    assert compare_environments([_facts(f"rank {r}") for r in range(4)]) == []


def test_the_rank_with_another_torch_is_named():
    ranks = [_facts(f"rank {r}", torch="2.13.0" if r != 2 else "2.9.1") for r in range(4)]
    [finding] = compare_environments(ranks)
    assert finding.what == "torch" and finding.odd_ones == ("rank 2",)
    assert "rank 2 has 2.9.1 where most have 2.13.0" in finding.message


def test_small_dev_shm_is_a_finding():
    [finding] = compare_environments([_facts("rank 0", shm_total_bytes=64 << 20)])
    assert "/dev/shm is 64 MiB on host-a" in finding.message and "--shm-size" in finding.message


def test_diagnose_names_the_rank_whose_nccl_variable_differs(cluster):
    actor = ray.remote(num_cpus=0)(GlooRank)
    ranks = [
        actor.options(
            runtime_env={"env_vars": {"NCCL_SOCKET_IFNAME": "eth9" if r == 2 else "eth0"}}
        ).remote(r + 10, 3, explicit_rank=True)
        for r in range(3)
    ]
    pids = ray.get([a.pid.remote() for a in ranks])
    wait_registered(pids)

    result = CliRunner().invoke(cli.app, ["diagnose", "--json"])

    for a in ranks:
        ray.kill(a)
    assert result.exit_code == 1, result.output
    data = json.loads(result.output)["data"]
    findings = [f for job in data.values() for f in job["findings"]]
    nccl = [f for f in findings if f["what"] == "NCCL_SOCKET_IFNAME"]
    assert nccl and nccl[0]["odd_ones"] == ["rank 12"]
