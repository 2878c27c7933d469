"""The real-node cluster (containerd kubelets on this machine): sites, start/stop, images, the
operator release, the digits jobs. Shared by the e2e tier and bench/ (tests/e2e/conftest.py
holds only the fixtures)."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from kubegan_operator.api.pricing import DEFAULT_PRICES

from tests.support.control_plane import base_env, cluster_up

ROOT = Path(__file__).resolve().parents[2]


HACK = ROOT / "hack"


CHART = ROOT / "charts" / "kubegan"


KWOK_NODES = ROOT / "tests" / "cluster" / "fixtures" / "nodes-gke-t4.yaml"


@dataclass(frozen=True)
class Site:
    """A real-node site's machine-wide names and addresses (KUBEGAN_REAL_SITE), as
    hack/real-node-lib.sh's `print_site` gives them: one source for the scripts and the tests."""

    names: dict[str, str]

    def __getitem__(self, key: str) -> str:
        return self.names[key]

    @property
    def name(self) -> str:
        return self["SITE"]

    @property
    def env(self) -> dict[str, str]:
        """What every hack script for this site's nodes runs with."""
        return {"KUBEGAN_REAL_SITE": self.name}

    def node(self, i: int) -> str:
        return f"{self['NODE_PREFIX']}-{i}"

    def resources(self, cluster_dir: Path | None = None) -> list[str]:
        """Everything of this site's real nodes on the machine (and, given its cluster dir,
        every mount and process under it): netns, links, routes, mounts, processes, the /run
        dir, cgroups. Another site's are not looked at."""
        found: list[str] = []
        netns_re = re.compile(rf"{re.escape(self['NETNS_PREFIX'])}-\d+")
        veth_re = re.compile(rf"{re.escape(self['VETH_PREFIX'])}-[hn]\d+")
        nets = [ipaddress.ip_network(self[k]) for k in ("NODE_NETWORK", "POD_NETWORK")]
        netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
        found += [
            f"netns {ln.split()[0]}"
            for ln in netns.stdout.splitlines()
            if netns_re.fullmatch(ln.split()[0])
        ]
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=False)
        for line in links.stdout.splitlines():
            name = line.split(":")[1].strip().split("@")[0]
            if name == self["HOST_BRIDGE"] or veth_re.fullmatch(name):
                found.append(f"link {name}")
        routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True, check=False)
        for route in routes.stdout.splitlines():
            dest = route.split()[0]
            if dest != "default" and any(
                ipaddress.ip_network(dest, strict=False).overlaps(n) for n in nets
            ):
                found.append(f"route {route}")
        run_root = self["RUN_ROOT"]
        markers = [f"{run_root}/", f"/{self['NODE_PREFIX']}-", self["RELAY_BIND"]]
        if cluster_dir is not None:
            markers.append(f"{cluster_dir}/")
        mounts = Path("/proc/self/mountinfo").read_text()
        for m in mounts.splitlines():
            point = m.split()[4]
            if point == run_root or any(mk in point + "/" for mk in markers):
                found.append(f"mount {point}")
        for pid_dir in Path("/proc").glob("[0-9]*"):
            try:
                raw = (pid_dir / "cmdline").read_bytes()
            except OSError:
                continue
            cmdline = raw.replace(b"\0", b" ").decode(errors="replace")
            if any(mk in cmdline for mk in markers):
                found.append(f"process {pid_dir.name}: {cmdline[:120]}")
        found += [f"path {run_root}"] if Path(run_root).exists() else []
        found += [f"cgroup {p}" for p in Path("/sys/fs/cgroup").glob(f"*/{self['CGROUP_PARENT']}")]
        return found


@cache
def site(name: str) -> Site:
    script = 'REPO_ROOT="$1"; source "$1/hack/real-node-lib.sh" && print_site'
    proc = subprocess.run(
        ["bash", "-c", script, "print_site", str(ROOT)],
        env={**os.environ, "KUBEGAN_REAL_SITE": name},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, f"site {name}: {proc.stderr}"
    return Site(dict(ln.split("=", 1) for ln in proc.stdout.splitlines()))


SITE = site("e2e")


REAL_NODES = (SITE.node(1), SITE.node(2))


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


def run(cmd: list[str], env: dict[str, str], timeout: float = 900) -> str:
    proc = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    )
    return proc.stdout


def leftovers(site: Site = SITE, cluster_dir: Path | None = None) -> list[str]:
    """Everything real-node-up creates on the machine for `site` that must be gone after
    real-node-down (another site's nodes, e.g. a `make cluster-up` cluster, may be up)."""
    return site.resources(cluster_dir)


@dataclass
class RealCluster:
    env: dict[str, str]
    dir: Path

    def claim_dir(self, claim: str, ns: str) -> Path:
        """The directory on this machine behind a claim (a hostPath PersistentVolume)."""
        volume = self.get("pvc", claim, ns)["spec"]["volumeName"]
        return Path(self.get("pv", volume)["spec"]["hostPath"]["path"])

    def empty_dir(self, pod: dict[str, Any], volume: str) -> Path:
        """An emptyDir volume of a pod on a real node, as this machine's folder: the kubelets
        share this host's filesystem (only their network is a namespace of its own), each
        with its root dir under the cluster dir (hack/real-node-up.sh)."""
        node, uid = pod["spec"]["nodeName"], pod["metadata"]["uid"]
        pod_dir = self.dir / "real-nodes" / node / "kubelet" / "pods" / uid
        return pod_dir / "volumes" / "kubernetes.io~empty-dir" / volume

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
        "metadata": {"name": name, "labels": dict(RESTRICTED)},  # a copy: callers add labels
    }


@contextmanager
def real_cluster_up(work_dir: Path, nodes: int = len(REAL_NODES)) -> Iterator[RealCluster]:
    """A control plane of its own (free ports, `work_dir`/cluster) with `nodes` real nodes and
    the KWOK GPU fixture nodes; everything is removed on exit, and nothing may be left."""
    assert os.geteuid() == 0, "real nodes need root (network namespaces, mounts, cgroups)"
    before = leftovers()
    assert not before, f"site {SITE.name}'s real nodes are already on this machine: {before}"
    cluster_dir = work_dir / "cluster"
    env = base_env(cluster_dir, REAL_NODES=str(nodes), **SITE.env)
    # New nodes get their images from the node image store by hard links: bring it up to
    # date with what `make images` built before the nodes start.
    run(["bash", str(HACK / "seed-node-images.sh")], env, timeout=1800)
    env = cluster_up(env)
    try:
        run(["bash", str(HACK / "real-node-up.sh")], env)
        cluster = RealCluster(env=env, dir=cluster_dir)
        cluster.kubectl("apply", "-f", str(KWOK_NODES))
        yield cluster
    finally:
        subprocess.run(["bash", str(HACK / "real-node-down.sh")], env=env, timeout=300, check=False)
        subprocess.run(["bash", str(HACK / "cluster-down.sh")], env=env, timeout=300, check=False)
    left = leftovers(cluster_dir=cluster_dir)
    assert not left, f"real-node-down left things behind: {left}"


def install_operator(cluster: RealCluster, values: dict[str, Any] | None = None) -> str:
    """The chart, installed with the local images into a `restricted` namespace; the operator
    runs as its Deployment on a real node with in-cluster config (the images must be loaded:
    `images_loaded`). `values` go on top (an upgrade of the release; without them it is put
    back as the session installs it). Returns the release name."""
    cluster.apply(restricted_namespace(OPERATOR_NS), restricted_namespace(JOBS_NS))
    name = "kubegan"
    helm = cluster.dir / "bin" / "helm"
    # The preset a user installs with (docs/guide.md: "A real local cluster"); this build's tag.
    values_file = cluster.dir / "e2e-values.yaml"
    values_file.write_text(
        yaml.safe_dump(
            {"image": {"tag": IMAGE_TAG}, "trainerImages": TRAINER_IMAGES, **(values or {})}
        )
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
        cluster.env,
        timeout=400,
    )
    return name


# The scenarios that stop a digits-torch job (a reclaim, a Kueue eviction) do it inside epoch 3;
# 8 leaves five epochs for the stop to land in while the job still trains, on a loaded machine.
EPOCHS = {"digits-torch": 8, "digits-tf": 6}


# What a digits_job costs an hour on the real nodes (labelled as a GKE spot E2 pool) with the
# chart's default prices: two workers' half vCPU and 3 GiB each, at the spot prices.
DIGITS_RATE_PER_HOUR = 2 * (0.5 * DEFAULT_PRICES.cpu.spot + 3 * DEFAULT_PRICES.memory.spot)


def digits_job(name: str, framework: str, epochs: int, **spec: Any) -> dict[str, Any]:
    """The e2e tier's training job: AC-GAN on the digits, 8 steps per epoch, a fixed seed,
    two CPU workers (one per real node), checkpoints on the shared claim every epoch."""
    return {
        "apiVersion": "kubegan.io/v1alpha1",
        "kind": "GANTrainingJob",
        "metadata": {"name": name, "namespace": JOBS_NS},
        "spec": {
            "framework": framework,
            "strategy": "auto",
            "model": {"name": "acgan", "options": {"imageSize": 16}},
            "data": {"source": "digits"},
            "training": {
                "epochs": epochs,
                "batchSizePerReplica": 64,
                "stepsPerEpoch": 8,
                "seed": 7,
            },
            # Each real node reports the whole machine (2 CPUs): half a CPU per worker lets
            # two jobs run side by side, one worker of each on each node.
            "resources": {"workers": 2, "gpusPerWorker": 0, "cpu": "500m", "memory": "3Gi"},
            "placement": {"nodeSelector": REAL_NODE_SELECTOR},
            "checkpoint": {"claimName": CHECKPOINT_CLAIM, "intervalEpochs": 1, "keep": 2},
            **spec,
        },
    }


@dataclass
class Watched:
    """What was seen of one job while it ran."""

    epochs_while_running: list[int] = field(default_factory=list)
    get_lines: list[str] = field(default_factory=list)
    final: dict[str, Any] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)
