"""The local control plane can run Kubernetes 1.36's own gang scheduling (hack/cluster-up.sh
KUBEGAN_NATIVE_GANG=true): the apiserver serves scheduling.k8s.io/v1alpha2 PodGroups,
and the scheduler holds a gang's pods until the group's minCount exist, then binds them all."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.control_plane import PrivateCluster, private_control_plane
from tests.support.kube import wait_for

GROUP_API = "scheduling.k8s.io/v1alpha2"


@pytest.fixture(scope="module")
def gang_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateCluster]:
    with private_control_plane(tmp_path_factory.mktemp("gang"), native_gang=True) as cluster:
        capacity = {"cpu": "8", "memory": "32Gi", "pods": "110"}
        cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "gang-node-0", "annotations": {"kwok.x-k8s.io/node": "fake"}},
                "status": {"capacity": capacity, "allocatable": capacity},
            }
        )
        yield cluster


def member(namespace: str, name: str, group: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulingGroup": {"podGroupName": group},
            "restartPolicy": "Never",
            "containers": [
                {"name": "worker", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
            ],
        },
    }


def test_pods_of_a_podgroup_bind_only_once_min_count_exist(gang_cluster: PrivateCluster) -> None:
    cluster = gang_cluster
    ns = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", ns)
    wait_for("the default service account", lambda: cluster.get("serviceaccount", "default", ns))
    cluster.apply(
        {
            "apiVersion": GROUP_API,
            "kind": "PodGroup",
            "metadata": {"name": "gang", "namespace": ns},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
        }
    )
    group = cluster.get("podgroups.scheduling.k8s.io", "gang", ns)
    assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2

    cluster.apply(member(ns, "worker-0", "gang"))
    pod = cluster.get("pod", "worker-0", ns)
    # The apiserver kept the field (it drops fields of a feature that is off).
    assert pod["spec"].get("schedulingGroup") == {"podGroupName": "gang"}
    # Alone it is not enough for the gang: the scheduler keeps it unbound, though the node fits.
    time.sleep(5)
    assert not cluster.get("pod", "worker-0", ns)["spec"].get("nodeName")

    cluster.apply(member(ns, "worker-1", "gang"))

    def both_bound() -> bool:
        pods = [cluster.get("pod", f"worker-{i}", ns) for i in range(2)]
        return all(p["spec"].get("nodeName") == "gang-node-0" for p in pods)

    wait_for("both members bound once the gang is complete", both_bound, timeout=60)
