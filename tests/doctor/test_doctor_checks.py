"""The preflight checks as pure functions over synthetic node facts, and the report's text."""

from __future__ import annotations

import dataclasses

from rich.console import Console

from rankscope.doctor.preflight.checks import (
    check_clock,
    check_gpus,
    check_shm,
    check_variables,
    check_versions,
    interface_matches,
    run_checks,
    version_tuple,
)
from rankscope.doctor.preflight.collect_node import node_facts, parse_xids
from rankscope.doctor.preflight.model import (
    ClusterFacts,
    Gpu,
    NodeFacts,
    PreflightReport,
    Status,
)
from rankscope.doctor.preflight.render import render_html, render_preflight

GIB = 1 << 30
CLUSTER = ClusterFacts(
    address="10.0.0.1:6379", token_auth=True, dashboard_url=None, dashboard_error=None
)


def _node(label: str, **changes: object) -> NodeFacts:
    base = NodeFacts(
        label=label,
        node_id=label,
        hostname="h",
        python="3.11.7",
        versions={"torch": "2.6.0", "ray": "2.60.0", "vllm": "0.8.5", "rankscope": "0.1.0"},
        torch_cuda="12.4",
        gpus=tuple(
            Gpu(str(i), "NVIDIA H100 80GB HBM3", "550.54.15", 81559, 81000, 0, "9.0")
            for i in range(8)
        ),
        gpu_error=None,
        shm={"total": 64 * GIB, "free": 64 * GIB},
        nofile=(1048576, 1048576),
        disks={
            "ray temp dir": {"path": "/tmp/ray", "usage": {"total": 500 * GIB, "free": 400 * GIB}}
        },
        memory={"total": 1024 * GIB, "available": 900 * GIB},
        variables={"NCCL_SOCKET_IFNAME": "eth0"},
        interfaces=("eth0", "ib0", "lo"),
        shared=None,
        fake=None,
        clock_offset_s=0.0,
        clock_error_s=0.001,
        ray_gpus=8,
        object_store_bytes=20 * GIB,
    )
    return dataclasses.replace(base, **changes)


def test_a_healthy_cluster_passes_every_check():
    checks = run_checks([_node("head"), _node("w1")], CLUSTER)
    assert {c.name: c.status for c in checks if c.status not in (Status.OK, Status.SKIP)} == {
        "ray": Status.WARN  # no dashboard in CLUSTER
    }


def test_a_version_skew_fails_naming_the_node():
    odd = _node("w1", versions={**_node("x").versions, "vllm": "0.7.3"})
    check = check_versions([_node("head"), odd, _node("w2")], CLUSTER)
    assert check.status == Status.FAIL
    assert check.summary == "vllm: 0.7.3 on w1 where the others have 0.8.5"


def test_a_package_missing_on_one_node_is_a_skew():
    versions = {k: v for k, v in _node("x").versions.items() if k != "vllm"}
    check = check_versions([_node("head"), _node("w1", versions=versions)], CLUSTER)
    assert "vllm: not installed on w1" in check.summary


def test_an_old_gpu_driver_fails():
    old = tuple(dataclasses.replace(g, driver="470.82.01") for g in _node("x").gpus)
    check = check_versions([_node("head", gpus=old)], CLUSTER)
    assert check.status == Status.FAIL and "below 525.60.11 on head (470.82.01)" in check.summary
    assert version_tuple("525.60.11") > version_tuple("525.60.2")


def test_gpus_ray_declares_but_the_node_lacks():
    check = check_gpus([_node("head"), _node("w1", ray_gpus=4)], CLUSTER)
    assert check.status == Status.FAIL
    assert "w1: Ray declares 4 GPUs, nvidia-smi sees 8" in check.summary


def test_no_gpu_anywhere_is_skipped_with_the_reason():
    none = _node(
        "head", gpus=(), ray_gpus=0, gpu_error="no nvidia-smi on this node (no GPU driver)"
    )
    check = check_gpus([none], CLUSTER)
    assert check.status == Status.SKIP and check.evidence["head"].startswith("no nvidia-smi")


KERNEL_LOG = """\
[   12.345678] nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms
[ 8812.003141] NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python, Graphics Exception
[ 9001.100000] NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python, Graphics Exception
[ 9120.271828] NVRM: Xid (PCI:0000:86:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen \
off the bus.
"""


def test_xid_lines_of_the_kernel_log_are_parsed():
    assert parse_xids(KERNEL_LOG) == [
        {"pci": "PCI:0000:3b:00", "xid": 13, "text": "pid=4242, name=python, Graphics Exception"},
        {"pci": "PCI:0000:3b:00", "xid": 13, "text": "pid=4242, name=python, Graphics Exception"},
        {"pci": "PCI:0000:86:00", "xid": 79,
         "text": "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."},
    ]  # fmt: skip
    assert parse_xids("no driver lines\n") == []


def test_a_fatal_xid_fails_the_gpu_check_and_a_program_s_xid_warns():
    xids = tuple(parse_xids(KERNEL_LOG))
    check = check_gpus([_node("head"), _node("w1", xids=xids)], CLUSTER)
    assert check.status == Status.FAIL
    assert "w1: Xid 79 on PCI:0000:86:00: GPU has fallen off the bus" in check.summary
    assert "w1: Xid 13 on PCI:0000:3b:00 (2x)" in check.summary
    assert check.evidence["w1"].endswith("; 3 Xid errors since boot")
    assert "fatal Xids" in check.fix
    only_13 = tuple(x for x in xids if x["xid"] == 13)
    assert check_gpus([_node("w1", xids=only_13)], CLUSTER).status == Status.WARN
    unread = check_gpus([_node("w1", xid_error="the kernel log is not readable here")], CLUSTER)
    assert unread.status == Status.OK
    assert unread.evidence["w1"].endswith(
        "Xid errors not read: the kernel log is not readable here"
    )


def test_small_shm_fails_and_an_object_store_above_it_warns():
    small = _node("w1", shm={"total": 64 << 20, "free": 64 << 20})
    assert check_shm([_node("head"), small], CLUSTER).status == Status.FAIL
    big_store = _node("w1", object_store_bytes=100 * GIB)
    check = check_shm([_node("head"), big_store], CLUSTER)
    assert (
        check.status == Status.WARN
        and "object store 100.0 GiB > /dev/shm 64.0 GiB" in check.summary
    )


def test_nccl_socket_ifname_follows_nccl_syntax():
    ifaces = ["eth0", "eth1", "ib0", "lo"]
    assert interface_matches("eth", ifaces) == ["eth0", "eth1"]
    assert interface_matches("=eth", ifaces) == []
    assert interface_matches("^lo,ib", ifaces) == ["eth0", "eth1"]
    assert interface_matches("eth0", ["eth0"], exact=True) == ["eth0"]
    assert interface_matches("eth", ["eth0"], exact=True) == []


def test_an_interface_missing_on_one_node_fails():
    check = check_variables([_node("head"), _node("w1", interfaces=("ens5", "lo"))], CLUSTER)
    assert check.status == Status.FAIL
    assert "NCCL_SOCKET_IFNAME=eth0 matches no interface on w1 (it has ens5, lo)" in check.summary


def test_variables_that_differ_or_hurt():
    odd = _node("w1", variables={"NCCL_SOCKET_IFNAME": "eth0", "NCCL_P2P_DISABLE": "1"})
    check = check_variables([_node("head"), odd], CLUSTER)
    assert check.status == Status.FAIL
    assert "NCCL_P2P_DISABLE differs: 1 on w1 (others (unset))" in check.summary
    assert "NCCL_P2P_DISABLE=1 on w1" in check.summary


def test_clock_skew_beyond_the_round_trip_warns():
    assert (
        check_clock([_node("head"), _node("w1", clock_offset_s=0.3)], CLUSTER).status == Status.OK
    )
    check = check_clock([_node("head"), _node("w1", clock_offset_s=4.0)], CLUSTER)
    assert check.status == Status.WARN and "(w1)" in check.summary


def test_the_fact_source_reads_versions_without_importing_torch(monkeypatch, tmp_path):
    import sys

    monkeypatch.setenv("RANKSCOPE_DOCTOR_FAKE_VERSION", "vllm=0.0.1")
    had_torch = "torch" in sys.modules
    facts = node_facts({"here": str(tmp_path)}, str(tmp_path))
    assert facts["versions"]["vllm"] == "0.0.1" and facts["fake"] == "vllm=0.0.1"
    assert facts["versions"]["ray"] and facts["disks"]["here"]["usage"]["free"] > 0
    assert facts["shared"] == {"directory": str(tmp_path), "exists": True, "content": None}
    assert ("torch" in sys.modules) == had_torch


def test_rendered_report_groups_evidence_and_fix_by_check():
    report = PreflightReport(
        CLUSTER,
        (_node("head"), _node("w1", interfaces=("lo",))),
        tuple(run_checks([_node("head"), _node("w1", interfaces=("lo",))], CLUSTER)),
        ("w2: no answer within 30 s",),
    )
    console = Console(width=200, record=True, color_system=None)
    console.print(render_preflight(report))
    text = console.export_text()
    assert "rankscope doctor: 2 nodes, 7 ok, 1 warn, 1 fail, 1 skip" in text
    assert "NCCL_SOCKET_IFNAME=eth0 matches no interface on w1 (it has lo)" in text
    assert "w2: no answer within 30 s" in text
    assert "fix: set NCCL_/GLOO_ variables the same on every node" in text
    assert "nccl/gloo env" in render_html(report)
