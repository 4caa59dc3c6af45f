"""The preflight checks: pure functions from every node's facts to one `Check` each.

One function per check, listed in `CHECKS` in the order the report shows them. A check names
the nodes that are wrong, the evidence on every node, and the fix. No Ray, no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from rankscope.doctor.preflight.model import Check, ClusterFacts, NodeFacts, Status
from rankscope.units import human_bytes

__all__ = ["CHECKS", "interface_matches", "run_checks", "version_tuple"]

VERSIONED = (
    "torch",
    "ray",
    "transformers",
    "vllm",
    "verl",
    "rankscope",
    "nccl",
    "cuda_runtime",
)
MIN_SHM_BYTES = 1 << 30
MIN_NOFILE = 65536
MIN_FREE_DISK_BYTES = 10 << 30
LOW_FREE_DISK_BYTES = 1 << 30
LOW_AVAILABLE_MEMORY = 0.10
RAY_OOM_THRESHOLD = 0.95
"""Ray's memory monitor kills workers above this used fraction (RAY_memory_usage_threshold)."""
CLOCK_SKEW_S = 1.0
HURTING = {
    "NCCL_P2P_DISABLE": "turns off GPU peer-to-peer (NVLink/PCIe): all-reduce through host memory",
    "NCCL_IB_DISABLE": "turns off InfiniBand/RoCE: NCCL falls back to TCP sockets across nodes",
    "NCCL_SHM_DISABLE": "turns off shared-memory transport inside a node",
}
IFNAME_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
FATAL_XIDS = {
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}
"""Xids that mean the device (not the program) is broken: drain the node (NVIDIA's Xid catalog).
Others (13, 31, 43: a program's fault; 63, 92, 94: recovered ECC) are warnings."""

CheckFn = Callable[[Sequence[NodeFacts], ClusterFacts], Check]


def run_checks(nodes: Sequence[NodeFacts], cluster: ClusterFacts) -> list[Check]:
    """Every check in `CHECKS`, in order."""
    return [check(nodes, cluster) for check in CHECKS]


def version_tuple(version: str) -> tuple[int, ...]:
    """`525.60.11` -> (525, 60, 11); non-numeric parts end it (`2.13.0+cu128` -> (2, 13, 0))."""
    parts = []
    for part in version.replace("+", ".").replace("-", ".").split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def interface_matches(spec: str, interfaces: Sequence[str], *, exact: bool = False) -> list[str]:
    """The interfaces a NCCL_SOCKET_IFNAME value selects: comma-separated prefixes, `=` for an
    exact name, `^` to exclude (NCCL's syntax); GLOO_SOCKET_IFNAME names interfaces exactly."""
    spec = spec.strip()
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    if spec.startswith("="):
        exact, spec = True, spec[1:]
    names = [s.strip() for s in spec.split(",") if s.strip()]

    def hit(iface: str) -> bool:
        return any(iface == n if exact else iface.startswith(n) for n in names)

    return [i for i in interfaces if hit(i) != exclude]


def _odd_ones(values: dict[str, str]) -> tuple[str, list[str]]:
    """The majority value and the nodes that differ from it."""
    majority = Counter(values.values()).most_common(1)[0][0]
    return majority, [n for n, v in values.items() if v != majority]


def check_versions(nodes: Sequence[NodeFacts], cluster: ClusterFacts) -> Check:
    rows: dict[str, dict[str, str]] = {"python": {n.label: n.python for n in nodes}}
    for what in VERSIONED:
        rows[what] = {n.label: n.versions.get(what) or "not installed" for n in nodes}
    rows["torch cuda"] = {n.label: n.torch_cuda or "none" for n in nodes if n.versions.get("torch")}
    rows["gpu driver"] = {n.label: n.gpus[0].driver for n in nodes if n.gpus}
    problems = []
    for what, values in rows.items():
        if len(set(values.values())) > 1:
            majority, odd = _odd_ones(values)
            shown = ", ".join(f"{values[n]} on {n}" for n in odd)
            problems.append(f"{what}: {shown} where the others have {majority}")
    low = [
        f"{n.label} ({n.gpus[0].driver})"
        for n in nodes
        if n.gpus and version_tuple(n.gpus[0].driver) < version_tuple(cluster.min_driver)
    ]
    if low:
        problems.append(f"gpu driver below {cluster.min_driver} on {', '.join(low)}")
    faked = [f"{n.label}: {n.fake}" for n in nodes if n.fake]
    evidence = {n.label: _versions_line(n) for n in nodes}
    if faked:
        evidence["faked"] = "; ".join(faked)
    if problems:
        return Check(
            "versions",
            Status.FAIL,
            "; ".join(problems),
            evidence,
            "install the same versions on every node (one image, or one `--runtime-env`); "
            "upgrade the GPU driver where it is below the minimum",
        )
    return Check("versions", Status.OK, "the same versions on every node", evidence)


def _versions_line(n: NodeFacts) -> str:
    items = [f"python {n.python}"]
    for what in VERSIONED:
        v = n.versions.get(what)
        if v:
            items.append(f"{what} {v}" + (f" (cuda {n.torch_cuda})" if what == "torch" else ""))
    if n.gpus:
        items.append(f"driver {n.gpus[0].driver}")
    return ", ".join(items)


def check_gpus(nodes: Sequence[NodeFacts], cluster: ClusterFacts) -> Check:
    if not any(n.gpus or n.ray_gpus for n in nodes):
        return Check(
            "gpus",
            Status.SKIP,
            "no GPU on any node (no nvidia-smi, no GPU resource in Ray)",
            {n.label: n.gpu_error or "no GPU" for n in nodes},
        )
    fails, warns, evidence = [], [], {}
    for n in nodes:
        names = Counter(g.name for g in n.gpus)
        free = sum(g.free_mib or 0 for g in n.gpus)
        total = sum(g.total_mib or 0 for g in n.gpus)
        evidence[n.label] = (
            f"{len(n.gpus)} GPU ({', '.join(f'{c}x {m}' for m, c in names.items()) or 'none'}), "
            f"Ray declares {n.ray_gpus:g}, free {free / 1024:.1f} of {total / 1024:.1f} GiB"
        )
        if int(n.ray_gpus) != len(n.gpus):
            fails.append(
                f"{n.label}: Ray declares {n.ray_gpus:g} GPUs, nvidia-smi sees {len(n.gpus)}"
            )
        if any((g.ecc_uncorrected or 0) > 0 for g in n.gpus):
            fails.append(f"{n.label}: uncorrected ECC errors")
        if total and free < 0.9 * total:
            warns.append(f"{n.label}: {(total - free) / 1024:.1f} GiB already in use")
        fatal, other = _xids(n)
        fails += [f"{n.label}: {x}" for x in fatal]
        warns += [f"{n.label}: {x}" for x in other]
        if n.xids:
            evidence[n.label] += f"; {len(n.xids)} Xid errors since boot"
        elif n.gpus and n.xid_error:
            evidence[n.label] += f"; Xid errors not read: {n.xid_error}"
    models = {g.name for n in nodes for g in n.gpus}
    if len(models) > 1:
        warns.append(f"GPU models differ across nodes: {', '.join(sorted(models))}")
    status = Status.FAIL if fails else Status.WARN if warns else Status.OK
    fix = {
        Status.FAIL: "start Ray with --num-gpus matching the devices (or fix "
        "CUDA_VISIBLE_DEVICES); drain nodes with ECC errors or fatal Xids",
        Status.WARN: "stop what holds GPU memory before launching (nvidia-smi lists it)",
        Status.OK: "",
    }[status]
    return Check(
        "gpus", status, "; ".join(fails + warns) or "every node's GPUs match Ray", evidence, fix
    )


def _xids(node: NodeFacts) -> tuple[list[str], list[str]]:
    """The node's Xid errors as lines, fatal and other, each kind once with its count."""
    counts: Counter[tuple[int, str]] = Counter((int(x["xid"]), str(x["pci"])) for x in node.xids)
    fatal, other = [], []
    for (xid, pci), count in sorted(counts.items()):
        times = f" ({count}x)" if count > 1 else ""
        if xid in FATAL_XIDS:
            fatal.append(f"Xid {xid} on {pci}: {FATAL_XIDS[xid]}{times}")
        else:
            other.append(f"Xid {xid} on {pci}{times}")
    return fatal, other


def check_shm(nodes: Sequence[NodeFacts], cluster: ClusterFacts) -> Check:
    fails, warns, evidence = [], [], {}
    for n in nodes:
        if n.shm is None:
            evidence[n.label] = "no /dev/shm"
            fails.append(f"{n.label}: no /dev/shm")
            continue
        total = n.shm["total"]
        evidence[n.label] = (
            f"/dev/shm {human_bytes(total)} ({human_bytes(n.shm['free'])} free), "
            f"object store {human_bytes(n.object_store_bytes)}"
        )
        if total < MIN_SHM_BYTES:
            fails.append(f"{n.label}: /dev/shm is {human_bytes(total)}")
        if n.object_store_bytes > total:
            warns.append(
                f"{n.label}: object store {human_bytes(n.object_store_bytes)} > /dev/shm "
                f"{human_bytes(total)} (Ray puts it on disk: slow)"
            )
    status = Status.FAIL if fails else Status.WARN if warns else Status.OK
    fix = (
        "in Docker pass --shm-size=16g (or --ipc=host); keep --object-store-memory below /dev/shm"
        if status != Status.OK
        else ""
    )
    return Check("/dev/shm", status, "; ".join(fails + warns) or "/dev/shm fits", evidence, fix)


def check_nofile(nodes: Sequence[NodeFacts], cluster: ClusterFacts) -> Check:
    low = [n.label for n in nodes if n.nofile and n.nofile[0] < MIN_NOFILE]
    evidence = {
        n.label: f"soft {n.nofile[0]}, hard {n.nofile[1]}" if n.nofile else "?" for n in nodes
    }
    if low:
        return Check(
            "ulimit -n",
            Status.WARN,
            f"open-file limit below {MIN_NOFILE} on {', '.join(low)}",
            evidence,
            "raise it before `ray start` (ulimit -n 65536, or LimitNOFILE in the unit): Ray "
            "opens a socket per worker and NCCL several per peer",
        )
    return Check("ulimit -n", Status.OK, f"at least {MIN_NOFILE} everywhere", evidence)


def check_disk(nodes: Sequence[NodeFacts], cluster: ClusterFacts) -> Check:
    fails, warns, evidence = [], [], {}
    for n in nodes:
        parts = []
        for name, disk in sorted(n.disks.items()):
            usage = disk.get("usage")
            if usage is None:
                parts.append(f"{name} {disk['path']}: missing")
                warns.append(f"{n.label}: {name} {disk['path']} does not exist")
                continue
            free = usage["free"]
            parts.append(f"{name} {disk['path']}: {human_bytes(free)} free")
            if free < LOW_FREE_DISK_BYTES or free < (1 - RAY_OOM_THRESHOLD) * usage["total"]:
                fails.append(f"{n.label}: {name} has {human_bytes(free)} free")
            elif free < MIN_FREE_DISK_BYTES:
                warns.append(f"{n.label}: {name} has {human_bytes(free)} free")
        evidence[n.label] = "; ".join(parts)
    status = Status.FAIL if fails else Status.WARN if warns else Status.OK
    fix = (
        "free disk (old /tmp/ray/session_* folders, checkpoints); Ray stops spilling objects "
        "above 95% full and logs fill it"
        if status != Status.OK
        else ""
    )
    return Check("disk", status, "; ".join(fails + warns) or "enough free disk", evidence, fix)


def check_memory(nodes: Sequence[NodeFacts], cluster: ClusterFacts) -> Check:
    fails, warns, evidence = [], [], {}
    for n in nodes:
        if n.memory is None:
            evidence[n.label] = "?"
            continue
        total, avail = n.memory["total"], n.memory["available"]
        evidence[n.label] = f"{human_bytes(avail)} available of {human_bytes(total)}"
        if avail < (1 - RAY_OOM_THRESHOLD) * total:
            fails.append(f"{n.label}: {human_bytes(avail)} available")
        elif avail < LOW_AVAILABLE_MEMORY * total:
            warns.append(f"{n.label}: {human_bytes(avail)} available")
    status = Status.FAIL if fails else Status.WARN if warns else Status.OK
    fix = (
        "Ray's OOM killer stops workers above 95% host memory: free memory first"
        if fails or warns
        else ""
    )
    return Check(
        "host memory", status, "; ".join(fails + warns) or "enough host memory", evidence, fix
    )


def check_shared_fs(nodes: Sequence[NodeFacts], cluster: ClusterFacts) -> Check:
    if cluster.shared_path is None:
        return Check("shared fs", Status.SKIP, "no --shared-path given (e.g. the checkpoint dir)")
    if cluster.sentinel_write_error:
        return Check(
            "shared fs",
            Status.FAIL,
            f"cannot write {cluster.shared_path} on {cluster.sentinel_writer}: "
            f"{cluster.sentinel_write_error}",
            {},
            "create the directory on a file system every node mounts",
        )
    evidence, missing = {}, []
    for n in nodes:
        s = n.shared or {}
        if s.get("content") == cluster.sentinel_token:
            evidence[n.label] = f"sentinel read back from {s.get('directory')}"
        else:
            why = "directory exists, sentinel not there" if s.get("exists") else "path missing"
            evidence[n.label] = f"{s.get('directory', cluster.shared_path)}: {why}"
            missing.append(n.label)
    if missing:
        return Check(
            "shared fs",
            Status.FAIL,
            f"{cluster.shared_path} written on {cluster.sentinel_writer} is not seen on "
            f"{', '.join(missing)}",
            evidence,
            "mount the same shared file system (NFS, Lustre, ...) at that path on every node: "
            "checkpoints written by one rank must be read by all",
        )
    return Check("shared fs", Status.OK, f"{cluster.shared_path} is shared by every node", evidence)


def check_clock(nodes: Sequence[NodeFacts], cluster: ClusterFacts) -> Check:
    measured = [n for n in nodes if n.clock_offset_s is not None]
    evidence = {
        n.label: f"{n.clock_offset_s:+.3f} s ± {n.clock_error_s or 0:.3f} s"
        for n in measured
        if n.clock_offset_s is not None
    }
    if len(measured) < 2:
        return Check("clock", Status.SKIP, "fewer than two nodes answered the clock task", evidence)
    offsets = [n.clock_offset_s or 0.0 for n in measured]
    spread = max(offsets) - min(offsets)
    slack = max(n.clock_error_s or 0.0 for n in measured) * 2
    if spread > CLOCK_SKEW_S + slack:
        ref = min(measured, key=lambda n: abs(n.clock_offset_s or 0.0))
        far = [
            n.label
            for n in measured
            if abs((n.clock_offset_s or 0) - (ref.clock_offset_s or 0)) > CLOCK_SKEW_S + slack
        ]
        return Check(
            "clock",
            Status.WARN,
            f"clocks differ by {spread:.2f} s across nodes ({', '.join(far)})",
            evidence,
            "run NTP (chrony) on every node: timelines, log order and token expiry depend on it",
        )
    return Check("clock", Status.OK, f"within {spread + slack:.3f} s", evidence)


def check_variables(nodes: Sequence[NodeFacts], cluster: ClusterFacts) -> Check:
    fails, warns = [], []
    names = sorted({k for n in nodes for k in n.variables})
    for name in names:
        values = {n.label: n.variables.get(name, "(unset)") for n in nodes}
        if len(set(values.values())) > 1:
            majority, odd = _odd_ones(values)
            fails.append(
                f"{name} differs: "
                + ", ".join(f"{values[o]} on {o}" for o in odd)
                + f" (others {majority})"
            )
        for label, value in values.items():
            if name in HURTING and value.strip() == "1":
                warns.append(f"{name}=1 on {label}: {HURTING[name]}")
    for name in IFNAME_VARIABLES:
        for n in nodes:
            spec = n.variables.get(name)
            if spec and not interface_matches(spec, n.interfaces, exact=name.startswith("GLOO")):
                fails.append(
                    f"{name}={spec} matches no interface on {n.label} "
                    f"(it has {', '.join(n.interfaces)})"
                )
    evidence = {
        n.label: ", ".join(f"{k}={v}" for k, v in n.variables.items()) or "none set" for n in nodes
    }
    status = Status.FAIL if fails else Status.WARN if warns else Status.OK
    fix = (
        "set NCCL_/GLOO_ variables the same on every node (runtime_env env_vars), naming "
        "interfaces each node has"
        if status != Status.OK
        else ""
    )
    summary = "; ".join(dict.fromkeys(fails + warns)) or "NCCL/GLOO variables agree"
    return Check("nccl/gloo env", status, summary, evidence, fix)


def check_ray(nodes: Sequence[NodeFacts], cluster: ClusterFacts) -> Check:
    warns = []
    evidence = {"cluster": cluster.address}
    if cluster.token_auth is False:
        warns.append("token authentication is off: anyone who reaches the GCS port can run code")
    evidence["token auth"] = {True: "on", False: "off", None: "unknown"}[cluster.token_auth]
    if cluster.dashboard_url is None or cluster.dashboard_error:
        warns.append(f"dashboard not reachable ({cluster.dashboard_error or 'not started'})")
    evidence["dashboard"] = cluster.dashboard_url or "none"
    for n in nodes:
        evidence[n.label] = f"object store {human_bytes(n.object_store_bytes)}"
    status = Status.WARN if warns else Status.OK
    fixes = []
    if cluster.token_auth is False:
        fixes.append("RAY_AUTH_MODE=token on `ray start`")
    if cluster.dashboard_url is None or cluster.dashboard_error:
        fixes.append("start the head with --include-dashboard=true (and ray[default])")
    fix = "; ".join(fixes)
    return Check("ray", status, "; ".join(warns) or "auth on, dashboard up", evidence, fix)


CHECKS: tuple[CheckFn, ...] = (
    check_versions,
    check_gpus,
    check_shm,
    check_nofile,
    check_disk,
    check_memory,
    check_shared_fs,
    check_clock,
    check_variables,
    check_ray,
)
