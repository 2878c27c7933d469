"""Karpenter (its KWOK cloud provider) as a process of this machine against a control plane of
tests/support/control_plane.py: the autoscaler of the cluster tier.

Karpenter's KWOK provider creates Node objects annotated `kwok.x-k8s.io/node: fake`, exactly
what hack/cluster-up.sh's KWOK controller manages (--manage-nodes-with-annotation-selector), so
its nodes turn Ready and pods bound to them Running like the fixture nodes. Its built-in
instance types have no GPUs; GPU_INSTANCE_TYPES below model GKE's a2-highgpu (A100) and
g2-standard (L4) and AKS's NCasT4_v3 (T4), NVadsA10_v5 (A10) and NCadsA100_v4 (A100) shapes,
each with a spot and an on-demand offering. NodePools (nodepool()) put on their nodes the labels
and taints kubegan's topology reads on GKE and AKS (foundation/topology.py): pool name,
accelerator, spot, `nvidia.com/gpu` taint.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubegan_trainer.launch.ports import reserve_ports

from tests.support.addons import AddonProcess, addon_binary
from tests.support.control_plane import PrivateCluster

GPU = "nvidia.com/gpu"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
NODE_CLASS = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}

# USD per accelerator-hour (on-demand, spot). T4 and A100 40GB: shared/REFERENCES.md "Default
# prices" (GCP us-central1, third-party catalogue snapshot); the same figures stand in for
# Azure, whose prices REFERENCES could not find, and for the 80 GB A100 (its figures there were
# inconsistent). L4 and A10 have no entry there: their figures are placeholders chosen only to
# keep the order T4 < L4 < A10 < A100, not prices from any catalogue.
GPU_PRICES: dict[str, tuple[float, float]] = {
    "t4": (0.35, 0.14),
    "l4": (0.70, 0.28),
    "a10": (1.40, 0.55),
    "a100": (2.93, 1.15),
}
# Per vCPU-hour and GiB-hour (on-demand, spot): E2 figures (the operator's default table before
# it priced machine types), so an offering's price grows with its vCPUs and GiB; Karpenter only
# orders offerings by them.
CPU_PRICE = (0.021811, 0.006543)
MEMORY_PRICE = (0.002923, 0.000877)


@dataclass(frozen=True)
class Family:
    """A machine family of one cloud: where its nodes are, how its GPUs are labelled."""

    cloud: str  # "gke" | "aks"
    gpu: str  # key of GPU_PRICES
    accelerator: str  # the value of the cloud's accelerator label
    zone: str
    # (instance type, vCPUs, memory GiB, GPUs per node)
    shapes: tuple[tuple[str, int, int, int], ...]


FAMILIES: dict[str, Family] = {
    "a2-highgpu": Family(
        "gke", "a100", "nvidia-tesla-a100", "us-central1-a",
        (("a2-highgpu-1g", 12, 85, 1), ("a2-highgpu-2g", 24, 170, 2),
         ("a2-highgpu-4g", 48, 340, 4), ("a2-highgpu-8g", 96, 680, 8)),
    ),
    "g2-standard": Family(
        "gke", "l4", "nvidia-l4", "us-central1-a",
        (("g2-standard-4", 4, 16, 1), ("g2-standard-24", 24, 96, 2),
         ("g2-standard-48", 48, 192, 4), ("g2-standard-96", 96, 384, 8)),
    ),
    "NCasT4_v3": Family(
        "aks", "t4", "nvidia", "eastus-1",
        (("Standard_NC4as_T4_v3", 4, 28, 1), ("Standard_NC64as_T4_v3", 64, 440, 4)),
    ),
    "NVadsA10_v5": Family(
        "aks", "a10", "nvidia", "eastus-1",
        (("Standard_NV36ads_A10_v5", 36, 440, 1), ("Standard_NV72ads_A10_v5", 72, 880, 2)),
    ),
    "NCadsA100_v4": Family(
        "aks", "a100", "nvidia", "eastus-1",
        (("Standard_NC24ads_A100_v4", 24, 220, 1), ("Standard_NC48ads_A100_v4", 48, 440, 2),
         ("Standard_NC96ads_A100_v4", 96, 880, 4)),
    ),
}  # fmt: skip

# The labels each cloud's node pools carry (REFERENCES "Kubernetes placement facts").
POOL_LABEL = {"gke": "cloud.google.com/gke-nodepool", "aks": "kubernetes.azure.com/agentpool"}
ACCELERATOR_LABEL = {
    "gke": "cloud.google.com/gke-accelerator",
    "aks": "kubernetes.azure.com/accelerator",
}
SPOT_LABEL = {
    "gke": ("cloud.google.com/gke-spot", "true"),
    "aks": ("kubernetes.azure.com/scalesetpriority", "spot"),
}


def instance_price(gpu: str, vcpus: int, memory_gib: int, gpus: int, spot: bool) -> float:
    i = 1 if spot else 0
    return round(gpus * GPU_PRICES[gpu][i] + vcpus * CPU_PRICE[i] + memory_gib * MEMORY_PRICE[i], 6)


def _offering(price: float, capacity_type: str, zone: str) -> dict[str, Any]:
    return {
        "Price": price,
        "Available": True,
        "Requirements": [
            {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": [capacity_type]},
            {"key": ZONE_LABEL, "operator": "In", "values": [zone]},
        ],
    }


def instance_types() -> list[dict[str, Any]]:
    """Karpenter KWOK's --instance-types-file-path document for every shape of FAMILIES."""
    types = []
    for family in FAMILIES.values():
        for name, vcpus, memory, gpus in family.shapes:
            offerings = [
                _offering(instance_price(family.gpu, vcpus, memory, gpus, spot), kind, family.zone)
                for spot, kind in ((True, "spot"), (False, "on-demand"))
            ]
            types.append(
                {
                    "name": name,
                    "offerings": offerings,
                    "architecture": "amd64",
                    "operatingSystems": ["linux"],
                    "resources": {
                        "cpu": str(vcpus),
                        "memory": f"{memory}Gi",
                        GPU: str(gpus),
                        "pods": "110",
                    },
                }
            )
    return types


def nodepool(
    name: str,
    family: str,
    *,
    spot: bool,
    gpu_limit: int | None = None,
    consolidate_after: str = "5s",
    spot_taint: bool | None = None,
) -> dict[str, Any]:
    """A NodePool for one machine family of FAMILIES, spot or on-demand. Its nodes carry the
    cloud's pool label (= `name`), accelerator label and (spot) spot label, the taint
    nvidia.com/gpu=present:NoSchedule and, where the cloud puts one on spot nodes (AKS always,
    GKE when asked: spot_taint), the spot taint. gpu_limit: the most GPUs the pool may hold
    (`spec.limits`). Empty nodes go after `consolidate_after`."""
    fam = FAMILIES[family]
    labels = {POOL_LABEL[fam.cloud]: name, ACCELERATOR_LABEL[fam.cloud]: fam.accelerator}
    taints = [{"key": GPU, "value": "present", "effect": "NoSchedule"}]
    if spot:
        key, value = SPOT_LABEL[fam.cloud]
        labels[key] = value
        if spot_taint if spot_taint is not None else fam.cloud == "aks":
            taints.append({"key": key, "value": value, "effect": "NoSchedule"})
    spec: dict[str, Any] = {
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "nodeClassRef": NODE_CLASS,
                "requirements": [
                    {"key": CAPACITY_TYPE_LABEL, "operator": "In",
                     "values": ["spot" if spot else "on-demand"]},
                    {"key": INSTANCE_TYPE_LABEL, "operator": "In",
                     "values": [shape[0] for shape in fam.shapes]},
                ],
                "taints": taints,
                "expireAfter": "Never",
            },
        },
        "disruption": {
            "consolidationPolicy": "WhenEmpty",
            "consolidateAfter": consolidate_after,
            "budgets": [{"nodes": "100%"}],
        },
    }  # fmt: skip
    if gpu_limit is not None:
        spec["limits"] = {GPU: str(gpu_limit)}
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": spec,
    }


def crd_files() -> list[Path]:
    """Karpenter's CRDs as its build copied them out of the module (NodePool, NodeClaim,
    NodeOverlay, CapacityBuffer, KWOKNodeClass)."""
    base = addon_binary("karpenter-kwok").parent
    files = sorted((base / "kwok" / "charts" / "crds").glob("*.yaml"))
    files += sorted((base / "kwok" / "apis" / "crds").glob("*.yaml"))
    return files


def install_crds(cluster: PrivateCluster) -> None:
    """Karpenter's CRDs and the KWOKNodeClass `default` every nodepool() refers to."""
    for f in crd_files():
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(f))
    cluster.wait_established(
        "nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "kwoknodeclasses.karpenter.kwok.sh"
    )
    cluster.apply(
        {
            "apiVersion": "karpenter.kwok.sh/v1alpha1",
            "kind": "KWOKNodeClass",
            "metadata": {"name": NODE_CLASS["name"]},
        }
    )


class Karpenter:
    """Karpenter's KWOK controller for one PrivateCluster: leader election off, metrics and
    health on leased ports, the batching window from the arguments (else the environment's
    BATCH_IDLE_DURATION / BATCH_MAX_DURATION, else 1s / 10s, Karpenter's defaults)."""

    def __init__(
        self,
        cluster: PrivateCluster,
        work_dir: Path,
        *,
        batch_idle: str | None = None,
        batch_max: str | None = None,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.work_dir = work_dir
        self.batch_idle = batch_idle or os.environ.get("BATCH_IDLE_DURATION", "1s")
        self.batch_max = batch_max or os.environ.get("BATCH_MAX_DURATION", "10s")
        self.extra_env = dict(extra_env or {})
        self.metrics_port, self.health_port = reserve_ports(2)
        self.instance_types_path = work_dir / "karpenter-instance-types.json"
        self.process = AddonProcess("karpenter", work_dir / "karpenter.log")

    def start(self, timeout: float = 120) -> None:
        """Install the CRDs and node class, write the instance types, start the process and
        wait for its readiness endpoint (caches synced, CRDs found)."""
        install_crds(self.cluster)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.instance_types_path.write_text(json.dumps(instance_types(), indent=1))
        env = {
            **os.environ,
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "DISABLE_LEADER_ELECTION": "true",
            "METRICS_PORT": str(self.metrics_port),
            "HEALTH_PROBE_PORT": str(self.health_port),
            "BATCH_IDLE_DURATION": self.batch_idle,
            "BATCH_MAX_DURATION": self.batch_max,
            "INSTANCE_TYPES_FILE_PATH": str(self.instance_types_path),
            "LOG_LEVEL": "debug",
            **self.extra_env,
        }
        self.process.spawn([str(addon_binary("karpenter-kwok"))], env)
        self.process.wait_healthy(f"http://127.0.0.1:{self.health_port}/readyz", timeout)

    def metrics(self) -> str:
        import urllib.request

        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as r:
            return str(r.read().decode())

    def nodes(self, pool: str = "") -> list[dict[str, Any]]:
        """Nodes Karpenter made (of NodePool `pool` when given)."""
        selector = f"{NODEPOOL_LABEL}={pool}" if pool else NODEPOOL_LABEL
        return list(self.cluster.get("nodes", selector=selector))

    def nodeclaims(self, pool: str = "") -> list[dict[str, Any]]:
        selector = f"{NODEPOOL_LABEL}={pool}" if pool else ""
        return list(self.cluster.get("nodeclaims.karpenter.sh", selector=selector))

    def stop(self) -> None:
        self.process.stop()


@contextmanager
def running_karpenter(
    cluster: PrivateCluster, work_dir: Path, **kwargs: Any
) -> Iterator[Karpenter]:
    """Karpenter started for `cluster`, stopped on exit (its nodes stay: the control plane's
    owner removes them with the cluster)."""
    karpenter = Karpenter(cluster, work_dir, **kwargs)
    try:
        karpenter.start()
        yield karpenter
    finally:
        karpenter.stop()
