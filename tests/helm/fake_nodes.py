"""KWOK fake nodes owned by one test (distinct names and a pool label), so the helm and
monitoring tests never share nodes with the operator's cluster tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.support.kube import Kubectl, wait_for

POOL_LABEL = "kubegan.io/test-pool"


def toleration(pool: str) -> dict[str, str]:
    """Tolerates the taint of a pool's nodes (only the owning test's pods do)."""
    return {"key": POOL_LABEL, "operator": "Equal", "value": pool, "effect": "NoSchedule"}


def fake_node(name: str, pool: str, gpus: int) -> dict[str, Any]:
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    if gpus:
        resources["nvidia.com/gpu"] = str(gpus)
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        POOL_LABEL: pool,
    }
    if gpus:
        labels["cloud.google.com/gke-accelerator"] = "nvidia-tesla-t4"  # a price-table key
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {"kwok.x-k8s.io/node": "fake"}},
        # Tainted: jobs of other tests (or sessions sharing the control plane) never plan on
        # these nodes; the owning test's job and the chart's operator pod tolerate it.
        "spec": {"taints": [{"key": POOL_LABEL, "value": pool, "effect": "NoSchedule"}]},
        "status": {"capacity": resources, "allocatable": resources},
    }


def node_ready(node: dict[str, Any] | None) -> bool:
    return bool(node) and any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in node.get("status", {}).get("conditions", [])
    )


@contextmanager
def fake_nodes(
    k: Kubectl, names: list[str], pool: str, gpus: int, namespace: str
) -> Iterator[list[str]]:
    """Create the nodes (KWOK marks them Ready); afterwards delete the namespace's jobs and
    pods first (no pod stays bound to a node name a later test reuses), then the nodes."""
    for name in names:
        k.run("delete", "node", name, "--ignore-not-found")  # leftovers of a killed run
        k.apply(fake_node(name, pool, gpus))
    try:
        wait_for(
            f"fake nodes {names} Ready",
            lambda: all(node_ready(k.get("node", n)) for n in names),
            timeout=60,
        )
        yield names
    finally:
        k.run("delete", "ganjob", "--all", "-n", namespace, "--wait=false", check=False)
        k.run(
            "delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force", check=False
        )
        k.run("delete", "node", *names, "--ignore-not-found", "--wait=false", check=False)
