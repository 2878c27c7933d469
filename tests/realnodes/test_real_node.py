"""One real node (kubelet + containerd in its own network namespace) runs a pod; down is clean.

Uses its own control plane (a temporary cluster dir and free ports), never the one `make
cluster-up` runs for people and the other tiers.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HACK = ROOT / "hack"
NODE = "kubegan-real-1"
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "hello-real"},
    "spec": {
        "nodeSelector": {"kubegan.io/real-node": "true"},
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "hello",
                "image": "kubegan.local/busybox:1.35",
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", "echo hello from $(hostname); sleep 3600"],
            }
        ],
    },
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd: list[str], env: dict[str, str], timeout: float = 600) -> str:
    proc = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _leftovers() -> list[str]:
    """Everything real-node-up creates on the machine that must be gone after real-node-down."""
    found: list[str] = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    found += [
        f"netns {line.split()[0]}"
        for line in netns.stdout.splitlines()
        if line.startswith("kg-real-")
    ]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=False)
    for line in links.stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name == "kg-nodes" or name.startswith("kgn-"):
            found.append(f"link {name}")
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True, check=False)
    found += [
        f"route {r}" for r in routes.stdout.splitlines() if r.startswith(("10.245.", "10.246."))
    ]
    mounts = Path("/proc/self/mountinfo").read_text()
    found += [
        f"mount {m.split()[4]}"
        for m in mounts.splitlines()
        if "kubegan-real" in m or "real-nodes" in m
    ]
    for pid_dir in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (
                (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            )
        except OSError:
            continue
        if (
            "/run/kubegan-real/" in cmdline
            or "real-nodes/kubegan-real-" in cmdline
            or "bind=10.246.0.1" in cmdline
        ):
            found.append(f"process {pid_dir.name}: {cmdline[:120]}")
    found += [f"path {p}" for p in ("/run/kubegan-real", "/run/containerd/s") if Path(p).exists()]
    found += [f"cgroup {p}" for p in Path("/sys/fs/cgroup").glob("*/kubegan")]
    return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    assert os.geteuid() == 0, "real nodes need root"
    assert not _leftovers(), f"real nodes already on this machine: {_leftovers()}"
    cluster_dir = tmp_path_factory.mktemp("realnodes") / "cluster"
    etcd_port = _free_port()
    while etcd_port > 65000:
        etcd_port = _free_port()
    env = dict(
        os.environ,
        KUBEGAN_CLUSTER_DIR=str(cluster_dir),
        KUBEGAN_APISERVER_PORT=str(_free_port()),
        KUBEGAN_ETCD_PORT=str(etcd_port),
        KUBEGAN_KCM_PORT=str(_free_port()),
        KUBEGAN_SCHEDULER_PORT=str(_free_port()),
        REAL_NODES="1",
    )
    env["KUBECONFIG"] = str(cluster_dir / "kubeconfig")
    _run(["bash", str(HACK / "cluster-up.sh")], env)
    try:
        _run(["bash", str(HACK / "real-node-up.sh")], env)
        yield env
    finally:
        subprocess.run(["bash", str(HACK / "real-node-down.sh")], env=env, check=False, timeout=300)
        subprocess.run(["bash", str(HACK / "cluster-down.sh")], env=env, check=False, timeout=300)


def _kubectl(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    kubectl = str(Path(env["KUBEGAN_CLUSTER_DIR"]) / "bin" / "kubectl")
    proc = subprocess.run(
        [kubectl, *args], env=env, input=stdin, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"kubectl {args} failed:\n{proc.stderr}"
    return proc.stdout


def test_node_is_ready_with_spot_pool_labels(cluster: dict[str, str]) -> None:
    node = json.loads(_kubectl(cluster, "get", "node", NODE, "-o", "json"))
    labels = node["metadata"]["labels"]
    assert labels["cloud.google.com/gke-spot"] == "true"
    assert labels["cloud.google.com/gke-nodepool"] == "real-spot"
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.36.3"
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://1.6")


def test_pod_runs_and_logs_are_readable(cluster: dict[str, str]) -> None:
    _kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(POD))
    _kubectl(cluster, "wait", "--for=condition=Ready", "pod/hello-real", "--timeout=90s")
    pod = json.loads(_kubectl(cluster, "get", "pod", "hello-real", "-o", "json"))
    assert pod["spec"]["nodeName"] == NODE
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["podIP"].startswith("10.245.1.")
    deadline = time.monotonic() + 30
    while "hello from hello-real" not in (logs := _kubectl(cluster, "logs", "hello-real")):
        assert time.monotonic() < deadline, f"no greeting in the logs: {logs!r}"
        time.sleep(1)


def test_down_leaves_nothing_behind(cluster: dict[str, str]) -> None:
    _run(["bash", str(HACK / "real-node-down.sh")], cluster, timeout=300)
    assert _leftovers() == []
    assert NODE not in _kubectl(cluster, "get", "nodes", "-o", "name")
    # Running it again is safe.
    _run(["bash", str(HACK / "real-node-down.sh")], cluster, timeout=300)
