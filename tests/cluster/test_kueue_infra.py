"""The Kueue the cluster tier runs (tests/support/kueue.py) works against a real
control plane: a plain-pod group of 2 is gated by Kueue's webhook, admitted as one Workload and
ungated when the ClusterQueue's quota allows; a second group stays gated while the quota is
full, and is admitted once the first finishes (its quota released).

A control plane of its own: Kueue's webhooks are cluster-wide objects."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubegan_api.contract import (
    KUEUE_ADMISSION_GATE,
    KUEUE_POD_GROUP_COUNT_ANNOTATION,
    KUEUE_POD_GROUP_LABEL,
    KUEUE_QUEUE_LABEL,
)

from tests.support.control_plane import PrivateCluster, private_control_plane
from tests.support.kube import wait_for
from tests.support.kueue import (
    GPU,
    Kueue,
    admitted,
    cluster_queue,
    local_queue,
    managed_namespace,
    resource_flavor,
    running_kueue,
    workloads,
)

ADMISSION_GATE = KUEUE_ADMISSION_GATE
QUEUE_LABEL = KUEUE_QUEUE_LABEL
GROUP_LABEL = KUEUE_POD_GROUP_LABEL
GROUP_COUNT_ANNOTATION = KUEUE_POD_GROUP_COUNT_ANNOTATION
# hack/kwok/stages.yaml: a Running pod with this label completes (phase Succeeded).
COMPLETE_LABEL = "pod-complete.stage.kwok.x-k8s.io"
QUEUE = "team-a"


@pytest.fixture(scope="module")
def queued(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrivateCluster, Kueue]]:
    """One control plane and one Kueue for the module; a ClusterQueue with quota for 4 GPUs and
    one fake node with 8 (the quota, not the node, is what holds a group back)."""
    work = tmp_path_factory.mktemp("kueue")
    with private_control_plane(work) as cluster, running_kueue(cluster, work) as kueue:
        cluster.apply(fake_gpu_node("gpu-node-0", gpus=8))
        cluster.apply(
            resource_flavor("default-flavor"), cluster_queue("cq", "default-flavor", gpus=4)
        )
        yield cluster, kueue


def fake_gpu_node(name: str, gpus: int) -> dict[str, Any]:
    capacity = {"cpu": "32", "memory": "256Gi", "pods": "110", GPU: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def group_pod(namespace: str, group: str, index: int, size: int, gpus: int) -> dict[str, Any]:
    """One pod of a Kueue plain-pod group of `size` (labels and annotation of KEP 976)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{group}-{index}",
            "namespace": namespace,
            "labels": {QUEUE_LABEL: QUEUE, GROUP_LABEL: group},
            "annotations": {GROUP_COUNT_ANNOTATION: str(size)},
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "worker",
                    "image": "busybox",
                    "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}},
                }
            ],
        },
    }


def create_group(cluster: PrivateCluster, namespace: str, group: str) -> list[dict[str, Any]]:
    """Create a group of 2 pods of 2 GPUs; returns the pods as the apiserver stored them (after
    the webhooks), so the gate is seen even if Kueue lifts it a moment later."""
    created = []
    for i in range(2):
        out = cluster.kubectl(
            "create",
            "-o",
            "json",
            "-f",
            "-",
            input=json.dumps(group_pod(namespace, group, i, 2, 2)),
        )
        created.append(json.loads(out.stdout))
    return created


def gates(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates", [])]


def group_pods(cluster: PrivateCluster, namespace: str, group: str) -> list[dict[str, Any]]:
    return list(cluster.get("pods", namespace=namespace, selector=f"{GROUP_LABEL}={group}"))


def group_workload(cluster: PrivateCluster, namespace: str, group: str) -> dict[str, Any] | None:
    return next((w for w in workloads(cluster, namespace) if w["metadata"]["name"] == group), None)


def test_a_pod_group_is_gated_admitted_whole_and_a_second_waits_for_quota(
    queued: tuple[PrivateCluster, Kueue],
) -> None:
    cluster, _ = queued
    ns = f"t-{uuid.uuid4().hex[:8]}"
    cluster.apply(managed_namespace(ns), local_queue(ns, QUEUE, "cq"))
    wait_for("the default service account", lambda: cluster.get("serviceaccount", "default", ns))

    first = create_group(cluster, ns, "group-a")
    assert all(ADMISSION_GATE in gates(p) for p in first), [gates(p) for p in first]

    def running_ungated(group: str) -> bool:
        pods = group_pods(cluster, ns, group)
        return len(pods) == 2 and all(
            not gates(p) and p["status"].get("phase") == "Running" for p in pods
        )

    wait_for(
        "group-a admitted, ungated and Running", lambda: running_ungated("group-a"), timeout=60
    )
    workload_a = group_workload(cluster, ns, "group-a")
    assert workload_a is not None and admitted(workload_a)
    # One Workload for the whole group, holding both pods' GPUs.
    podsets = workload_a["spec"]["podSets"]
    assert sum(ps["count"] for ps in podsets) == 2

    second = create_group(cluster, ns, "group-b")
    assert all(ADMISSION_GATE in gates(p) for p in second)
    workload_b = wait_for("group-b's Workload", lambda: group_workload(cluster, ns, "group-b"))
    # Quota is full: for a while (several of Kueue's scheduling passes) it stays unadmitted and
    # both pods stay gated and unbound.
    time.sleep(5)
    workload_b = group_workload(cluster, ns, "group-b")
    assert workload_b is not None and not admitted(workload_b), workload_b.get("status")
    pods_b = group_pods(cluster, ns, "group-b")
    assert all(ADMISSION_GATE in gates(p) and not p["spec"].get("nodeName") for p in pods_b)

    # group-a finishes (KWOK completes its pods): its quota goes back and group-b is admitted.
    for pod in group_pods(cluster, ns, "group-a"):
        cluster.kubectl("label", "pod", pod["metadata"]["name"], "-n", ns, f"{COMPLETE_LABEL}=true")
    wait_for(
        "group-b admitted once group-a finished", lambda: running_ungated("group-b"), timeout=60
    )
