"""Builders for Node and Pod objects as the apiserver returns them."""

from __future__ import annotations

from typing import Any


def node(
    name: str,
    gpus: int = 8,
    *,
    accelerator: str = "nvidia-tesla-v100",
    pool: str = "pool-a",
    spot: bool = False,
    ready: bool = True,
    cordoned: bool = False,
    taints: list[dict[str, str]] | None = None,
    labels: dict[str, str] | None = None,
    tpu_chips: int = 0,
    cpu: str = "96",
    memory: str = "624Gi",
) -> dict[str, Any]:
    all_labels = {"kubernetes.io/hostname": name, "cloud.google.com/gke-nodepool": pool}
    if gpus:
        all_labels["cloud.google.com/gke-accelerator"] = accelerator
    if spot:
        all_labels["cloud.google.com/gke-spot"] = "true"
    all_labels.update(labels or {})
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    if tpu_chips:
        allocatable["google.com/tpu"] = str(tpu_chips)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "spec": {"unschedulable": cordoned, "taints": taints or []},
        "status": {
            "allocatable": allocatable,
            "capacity": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(
    name: str,
    node_name: str,
    gpus: int,
    *,
    phase: str = "Running",
    namespace: str = "default",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": phase},
    }
