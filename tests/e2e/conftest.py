"""The e2e tier: a control plane of its own, two real nodes (kubelet + containerd in network
namespaces of this machine) beside KWOK fake nodes, the images built from the Dockerfile, and
the chart installed with them. Nothing is faked between `kubectl apply` and the trainer.

It needs root, `make node-binaries` and `make images` (`make test` does both). If any of it
cannot start, the tests fail: no skips.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
HACK = ROOT / "hack"
CHART = ROOT / "charts" / "kubegan"
KWOK_NODES = ROOT / "tests" / "cluster" / "fixtures" / "nodes-gke-t4.yaml"
REAL_NODES = ("kubegan-real-1", "kubegan-real-2")
REAL_NODE_SELECTOR = {"kubegan.io/real-node": "true"}
BUSYBOX = "kubegan.local/busybox:1.35"
# `make images` tags (hack/build-images.sh).
IMAGE_TAG = os.environ.get("KUBEGAN_IMAGE_TAG", "dev")
OPERATOR_IMAGE = f"kubegan.local/operator:{IMAGE_TAG}"
TRAINER_IMAGES = {
    "pytorch": f"kubegan.local/trainer-torch:{IMAGE_TAG}",
    "tensorflow": f"kubegan.local/trainer-tf:{IMAGE_TAG}",
}
OPERATOR_NS = "kubegan-system"
JOBS_NS = "ml"
CHECKPOINT_CLAIM = "kubegan-checkpoints"
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


def free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65000:  # etcd's peer port is port + 1
            return port


def run(cmd: list[str], env: dict[str, str], timeout: float = 900) -> str:
    proc = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    )
    return proc.stdout


def leftovers() -> list[str]:
    """Everything real-node-up creates on the machine that must be gone after real-node-down."""
    found: list[str] = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    found += [f"netns {ln.split()[0]}" for ln in netns.stdout.splitlines() if ln.startswith("kg-")]
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
            raw = (pid_dir / "cmdline").read_bytes()
        except OSError:
            continue
        cmdline = raw.replace(b"\0", b" ").decode(errors="replace")
        if (
            "/run/kubegan-real/" in cmdline
            or "real-nodes/kubegan-real-" in cmdline
            or "real-nodes/coredns" in cmdline
            or "bind=10.246.0.1" in cmdline
        ):
            found.append(f"process {pid_dir.name}: {cmdline[:120]}")
    found += [f"path {p}" for p in ("/run/kubegan-real",) if Path(p).exists()]
    found += [f"cgroup {p}" for p in Path("/sys/fs/cgroup").glob("*/kubegan")]
    return found


@dataclass
class RealCluster:
    env: dict[str, str]
    dir: Path

    def claim_dir(self, claim: str, ns: str) -> Path:
        """The directory on this machine behind a claim (a hostPath PersistentVolume)."""
        volume = self.get("pvc", claim, ns)["spec"]["volumeName"]
        return Path(self.get("pv", volume)["spec"]["hostPath"]["path"])

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 120
    ) -> str:
        proc = subprocess.run(
            [str(self.dir / "bin" / "kubectl"), *args],
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check:
            assert proc.returncode == 0, f"kubectl {' '.join(args)} failed:\n{proc.stderr}"
        return proc.stdout

    def apply(self, *objs: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objs))

    def get(self, kind: str, name: str, ns: str | None = None) -> dict[str, Any]:
        return json.loads(
            self.kubectl("get", kind, name, *(["-n", ns] if ns else []), "-o", "json")
        )

    def items(self, kind: str, *selector: str, ns: str | None = None) -> list[dict[str, Any]]:
        where = ["-n", ns] if ns else ["-A"]
        out = self.kubectl("get", kind, *where, *selector, "-o", "json")
        return json.loads(out)["items"]

    def diagnose(self, ns: str) -> str:
        """What a person would look at first when something in `ns` did not happen."""
        parts = [
            self.kubectl("get", "nodes,pods,ganjob", "-A", "-o", "wide", check=False),
            self.kubectl("get", "events", "-n", ns, "--sort-by=.lastTimestamp", check=False)[
                -6000:
            ],
        ]
        for pod in self.items("pods", ns=ns):
            name = pod["metadata"]["name"]
            logs = self.kubectl(
                "logs", "-n", ns, name, "--tail=40", "--all-containers", check=False
            )
            parts.append(f"--- logs {ns}/{name}\n{logs}")
        return "\n".join(parts)


def restricted_namespace(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": RESTRICTED},
    }


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    assert os.geteuid() == 0, "real nodes need root (network namespaces, mounts, cgroups)"
    assert not leftovers(), f"real nodes already on this machine: {leftovers()}"
    cluster_dir = tmp_path_factory.mktemp("e2e") / "cluster"
    env = dict(
        os.environ,
        KUBEGAN_CLUSTER_DIR=str(cluster_dir),
        KUBEGAN_APISERVER_PORT=str(free_port()),
        KUBEGAN_ETCD_PORT=str(free_port()),
        KUBEGAN_KCM_PORT=str(free_port()),
        KUBEGAN_SCHEDULER_PORT=str(free_port()),
        KUBECONFIG=str(cluster_dir / "kubeconfig"),
        REAL_NODES=str(len(REAL_NODES)),
    )
    # New nodes get their images from the node image store by hard links: bring it up to
    # date with what `make images` built before the nodes start.
    run(["bash", str(HACK / "seed-node-images.sh")], env, timeout=1800)
    run(["bash", str(HACK / "cluster-up.sh")], env)
    try:
        run(["bash", str(HACK / "real-node-up.sh")], env)
        cluster = RealCluster(env=env, dir=cluster_dir)
        cluster.kubectl("apply", "-f", str(KWOK_NODES))
        yield cluster
    finally:
        subprocess.run(["bash", str(HACK / "real-node-down.sh")], env=env, timeout=300, check=False)
        subprocess.run(["bash", str(HACK / "cluster-down.sh")], env=env, timeout=300, check=False)
    left = leftovers()
    assert not left, f"real-node-down left things behind: {left}"


@pytest.fixture(scope="session")
def images_loaded(real_cluster: RealCluster) -> dict[str, str]:
    """The Dockerfile's images (make images) in every real node's containerd: seeded when the
    node started; load-images checks the digests (and imports whatever differs)."""
    run(["bash", str(HACK / "load-images.sh")], real_cluster.env, timeout=1200)
    return {"operator": OPERATOR_IMAGE, **TRAINER_IMAGES}


@pytest.fixture(scope="session")
def operator_release(real_cluster: RealCluster, images_loaded: dict[str, str]) -> str:
    """The chart, installed with the local images into a `restricted` namespace; the operator
    runs as its Deployment on a real node with in-cluster config. Returns the release name."""
    real_cluster.apply(restricted_namespace(OPERATOR_NS), restricted_namespace(JOBS_NS))
    name = "kubegan"
    helm = real_cluster.dir / "bin" / "helm"
    # The preset a user installs with (README: "A real local cluster"); the tag of this build.
    values_file = real_cluster.dir / "e2e-values.yaml"
    values_file.write_text(
        yaml.safe_dump({"image": {"tag": IMAGE_TAG}, "trainerImages": TRAINER_IMAGES})
    )
    run(
        [
            str(helm),
            "upgrade",
            "--install",
            name,
            str(CHART),
            "-n",
            OPERATOR_NS,
            "-f",
            str(CHART / "values-local.yaml"),
            "-f",
            str(values_file),
            "--wait",
            "--timeout",
            "5m",
        ],
        real_cluster.env,
        timeout=400,
    )
    return name
