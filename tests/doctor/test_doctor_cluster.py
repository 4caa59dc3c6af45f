"""`rankscope doctor` over the real two-node cluster, and a third node started with another
environment (a version that differs, a directory only it has)."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

import rankscope.cli.main as cli
from rankscope.doctor.collect_nodes import alive_nodes, run_on_nodes
from rankscope.doctor.preflight.collect_node import FAKE_VERSION_VAR

ODD_NODE_RESOURCE = "doctor_odd_node"


def _doctor(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli.app, ["doctor", "--json", "--deadline", "60", *args])
    assert result.exit_code in (0, 1), result.output
    data = json.loads(result.stdout)["data"]
    return result.exit_code, data


def _checks(data: dict) -> dict[str, dict]:
    return {c["name"]: c for c in data["checks"]}


def test_run_on_nodes_answers_from_every_node_and_names_the_late_ones(cluster):
    nodes = alive_nodes()
    assert len(nodes) >= 2 and nodes[0].is_head
    answers = run_on_nodes(_node_id, deadline_s=60)
    assert answers.replies == {n.node_id: n.node_id for n in nodes}  # each ran on its own node
    late = run_on_nodes(_sleep, 30, deadline_s=1.0, nodes=nodes[1:2])
    assert late.replies == {} and [n.node_id for n in late.missing] == [nodes[1].node_id]


def _node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def _sleep(seconds: float) -> None:
    import time

    time.sleep(seconds)


def test_doctor_checks_both_nodes_and_a_shared_dir_passes(cluster, tmp_path):
    html = tmp_path / "doctor.html"
    _, data = _doctor("--shared-path", str(tmp_path), "--html", str(html))
    assert len(data["nodes"]) == 2 and not data["unanswered"]
    checks = _checks(data)
    assert checks["versions"]["status"] == "ok", checks["versions"]
    assert checks["shared fs"]["status"] == "ok", checks["shared fs"]
    assert checks["gpus"]["status"] == "skip"  # no GPU here: said, not failed
    assert checks["clock"]["status"] == "ok"
    assert not list(tmp_path.glob(".rankscope-doctor-*"))  # the sentinel is removed
    page = html.read_text()
    assert "shared fs" in page and 'id="report-data"' in page


@pytest.fixture(scope="module")
def odd_node(cluster, tmp_path_factory):
    """A node whose raylet (so every worker on it) has another transformers 'version' and a
    directory variable the other nodes lack."""
    only_here = tmp_path_factory.mktemp("only-on-odd-node")
    node = cluster.add_node(
        num_cpus=1,
        resources={ODD_NODE_RESOURCE: 1},
        env_vars={FAKE_VERSION_VAR: "transformers=0.0.1", "RS_DOCTOR_ONLY_HERE": str(only_here)},
    )
    cluster.wait_for_nodes()
    yield node
    cluster.remove_node(node)


def test_version_skew_and_a_path_on_one_node_only_fail_naming_the_nodes(odd_node):
    code, data = _doctor("--shared-path", "$RS_DOCTOR_ONLY_HERE")
    assert code == 1
    checks = _checks(data)
    odd = next(n["label"] for n in data["nodes"] if n["fake"])
    versions = checks["versions"]
    assert versions["status"] == "fail"
    assert f"transformers: 0.0.1 on {odd} where the others have" in versions["summary"]
    shared = checks["shared fs"]
    assert shared["status"] == "fail"
    others = [n["label"] for n in data["nodes"] if n["label"] != odd]
    assert shared["summary"].endswith(f"is not seen on {', '.join(others)}")
    assert f"written on {odd}" in shared["summary"]


def test_bad_runtime_env_file_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "env.yaml"
    bad.write_text("- just\n- a list\n")
    result = CliRunner().invoke(cli.app, ["doctor", "--runtime-env", str(bad)])
    assert result.exit_code == 2
    assert "must be a mapping" in result.output and len(result.output.strip().splitlines()) == 1
    assert os.path.exists(bad)


def test_runtime_env_checks_in_the_jobs_environment(cluster, tmp_path):
    """The job's runtime_env sets an interface no node has: only a check run in it sees that."""
    env = tmp_path / "runtime_env.yaml"
    env.write_text("env_vars:\n  NCCL_SOCKET_IFNAME: =rs-missing0\n")
    code, data = _doctor("--runtime-env", str(env))
    assert code == 1
    nccl = _checks(data)["nccl/gloo env"]
    assert nccl["status"] == "fail"
    for node in data["nodes"]:
        assert (
            f"NCCL_SOCKET_IFNAME==rs-missing0 matches no interface on {node['label']}"
            in (nccl["summary"])
        )
    assert data["cluster"]["runtime_env"] == str(env)


def test_config_lint_against_the_cluster_counts_its_gpus(cluster, tmp_path):
    """The session cluster declares no GPU: a config that wants 1 x 8 cannot run on it."""
    config = tmp_path / "trainer.yaml"
    config.write_text(
        "data: {train_batch_size: 16}\n"
        "actor_rollout_ref:\n  actor: {ppo_mini_batch_size: 8, ppo_micro_batch_size_per_gpu: 1}\n"
        "  rollout: {n: 1, tensor_model_parallel_size: 2}\n"
        "trainer: {nnodes: 1, n_gpus_per_node: 8}\n"
    )
    result = CliRunner().invoke(
        cli.app, ["doctor", "--config", str(config), "--address", cluster.address, "--json"]
    )
    assert result.exit_code == 1, result.output
    rows = {r["rule"]: r for r in json.loads(result.stdout)["data"]["rules"]}
    gpus = rows["GPUs in the cluster"]
    assert gpus["status"] == "fail"
    assert gpus["message"].startswith("1 x 8 = 8 GPUs wanted; the cluster has 0")


def test_config_lint_checks_the_checkpoint_dir_on_every_node(odd_node, cluster, tmp_path):
    def lint_rows(checkpoint_dir: str) -> dict[str, dict]:
        config = tmp_path / "trainer.yaml"
        config.write_text(
            f"trainer: {{nnodes: 1, n_gpus_per_node: 8, default_local_dir: '{checkpoint_dir}'}}\n"
        )
        result = CliRunner().invoke(
            cli.app, ["doctor", "--config", str(config), "--address", cluster.address, "--json"]
        )
        assert result.exit_code == 1, result.output  # the cluster has no GPU
        return {r["rule"]: r for r in json.loads(result.stdout)["data"]["rules"]}

    shared = lint_rows(str(tmp_path))["checkpoint dir"]
    assert shared["status"] == "ok" and "is seen on all 3" in shared["message"], shared
    one_node = lint_rows("$RS_DOCTOR_ONLY_HERE")["checkpoint dir"]
    assert one_node["status"] == "fail"
    assert one_node["message"].count("directory missing") == 2, one_node
