"""The autoscaler the cluster tier runs (tests/support/karpenter.py) works against a
real control plane: a pending GPU pod pinned to the spot pool gets exactly one Karpenter node
of that pool, with the labels kubegan's topology reads, and runs on it (KWOK plays its
kubelet); once the pod is gone Karpenter removes the empty node.

A control plane of its own (not `make cluster-up`'s): Karpenter adds nodes for any pending pod
a NodePool can take, which would disturb the other cluster tests' capacity."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.control_plane import PrivateCluster, private_control_plane
from tests.support.karpenter import (
    ACCELERATOR_LABEL,
    CAPACITY_TYPE_LABEL,
    GPU,
    INSTANCE_TYPE_LABEL,
    NODEPOOL_LABEL,
    POOL_LABEL,
    SPOT_LABEL,
    Karpenter,
    nodepool,
    running_karpenter,
)
from tests.support.kube import wait_for

SPOT_POOL = "a100-spot"
ON_DEMAND_POOL = "a100-ondemand"
AKS_POOL = "t4ondemand"


@pytest.fixture(scope="module")
def autoscaled(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[PrivateCluster, Karpenter]]:
    """One control plane and one Karpenter for the module, with a spot and an on-demand A100
    pool (GKE a2-highgpu shapes) at zero nodes. A short batching window keeps the test fast."""
    work = tmp_path_factory.mktemp("karpenter")
    with (
        private_control_plane(work) as cluster,
        running_karpenter(cluster, work, batch_idle="1s", batch_max="3s") as karpenter,
    ):
        cluster.apply(
            nodepool(SPOT_POOL, "a2-highgpu", spot=True, gpu_limit=8, consolidate_after="1s"),
            nodepool(ON_DEMAND_POOL, "a2-highgpu", spot=False, gpu_limit=8),
            nodepool(AKS_POOL, "NCasT4_v3", spot=False, gpu_limit=4),
        )
        yield cluster, karpenter


def gpu_pod(
    namespace: str, name: str, pool: str, gpus: int = 1, cloud: str = "gke"
) -> dict[str, Any]:
    """A pod asking for `gpus` GPUs on `pool` (the cloud's pool label), tolerating the GPU
    taint."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": {POOL_LABEL[cloud]: pool},
            "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
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


def new_namespace(cluster: PrivateCluster) -> str:
    ns = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", ns)
    wait_for("the default service account", lambda: cluster.get("serviceaccount", "default", ns))
    return ns


def test_spot_pool_scales_up_for_a_pending_gpu_pod_and_down_when_it_is_gone(
    autoscaled: tuple[PrivateCluster, Karpenter],
) -> None:
    cluster, karpenter = autoscaled
    assert karpenter.nodes() == [], "the pools must start at zero nodes"
    ns = new_namespace(cluster)
    cluster.apply(gpu_pod(ns, "worker-0", SPOT_POOL))

    def running_on_node() -> str:
        pod = cluster.get("pod", "worker-0", ns)
        return pod["spec"].get("nodeName", "") if pod["status"].get("phase") == "Running" else ""

    node_name = wait_for("the pod Running on a node Karpenter added", running_on_node, timeout=90)
    nodes = karpenter.nodes()
    assert [n["metadata"]["name"] for n in nodes] == [node_name], "exactly one node, the pod's"
    labels = nodes[0]["metadata"]["labels"]
    spot_key, spot_value = SPOT_LABEL["gke"]
    assert labels[NODEPOOL_LABEL] == SPOT_POOL
    assert labels[POOL_LABEL["gke"]] == SPOT_POOL
    assert labels[ACCELERATOR_LABEL["gke"]] == "nvidia-tesla-a100"
    assert labels[spot_key] == spot_value
    assert labels[CAPACITY_TYPE_LABEL] == "spot"
    # One GPU asked: the cheapest shape of the pool that holds it.
    assert labels[INSTANCE_TYPE_LABEL] == "a2-highgpu-1g"
    assert nodes[0]["status"]["allocatable"][GPU] == "1"
    taints = {(t["key"], t["effect"]) for t in nodes[0]["spec"].get("taints", [])}
    assert (GPU, "NoSchedule") in taints
    assert karpenter.nodes(ON_DEMAND_POOL) == []
    assert len(karpenter.nodeclaims(SPOT_POOL)) == 1

    cluster.kubectl("delete", "pod", "worker-0", "-n", ns, "--grace-period=0", "--force")
    wait_for("Karpenter to remove the empty node", lambda: not karpenter.nodes(), timeout=120)
    wait_for("its NodeClaim gone", lambda: not karpenter.nodeclaims(), timeout=60)


def test_an_aks_pool_takes_the_shape_that_fits_and_stops_at_its_limit(
    autoscaled: tuple[PrivateCluster, Karpenter],
) -> None:
    """A 4-GPU pod on the AKS T4 pool gets an NC64as_T4_v3 (4 x T4) with AKS's labels; a second
    one finds the pool at its 4-GPU limit: no second node, the pod stays Pending."""
    cluster, karpenter = autoscaled
    ns = new_namespace(cluster)
    cluster.apply(gpu_pod(ns, "big-0", AKS_POOL, gpus=4, cloud="aks"))

    def phase(name: str) -> str:
        pod = cluster.get("pod", name, ns)
        if pod is None:  # seen once (a fresh-clone run): say who deleted it, not a TypeError
            said = cluster.kubectl("get", "events", "-n", ns, "-o", "wide", check=False)
            raise AssertionError(f"pod {ns}/{name} was deleted; events in {ns}:\n{said.stdout}")
        return str(pod["status"].get("phase", ""))

    wait_for("the 4-GPU pod Running", lambda: phase("big-0") == "Running", timeout=90)
    (node,) = karpenter.nodes(AKS_POOL)
    labels = node["metadata"]["labels"]
    assert labels[INSTANCE_TYPE_LABEL] == "Standard_NC64as_T4_v3"
    assert labels[POOL_LABEL["aks"]] == AKS_POOL
    assert labels[ACCELERATOR_LABEL["aks"]] == "nvidia"
    assert labels[CAPACITY_TYPE_LABEL] == "on-demand"
    assert SPOT_LABEL["aks"][0] not in labels
    assert node["status"]["allocatable"][GPU] == "4"

    cluster.apply(gpu_pod(ns, "big-1", AKS_POOL, gpus=4, cloud="aks"))
    # Several of Karpenter's batching windows (1-3 s here): still one node, the pod Pending.
    time.sleep(10)
    assert len(karpenter.nodes(AKS_POOL)) == 1
    assert len(karpenter.nodeclaims(AKS_POOL)) == 1
    assert phase("big-1") == "Pending"
    cluster.kubectl("delete", "namespace", ns, "--wait=false")
