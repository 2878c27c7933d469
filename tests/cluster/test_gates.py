"""kube.lift_gates against a real apiserver: kubegan's gang gate goes, every other controller's
gate stays, wherever kubegan's sits in the list (the first try assumes it is first; a `test`
that fails makes it read the pod and try again at the right index).

A control plane of its own: the operator's writer is driven directly, with no operator."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from kubegan_api.contract import GANG_GATE, KUEUE_ADMISSION_GATE
from kubegan_operator.runtime.kube import Kube

from tests.support.control_plane import PrivateCluster, private_control_plane
from tests.support.kube import wait_for

OTHER = "example.com/other"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrivateCluster, Kube]]:
    work = tmp_path_factory.mktemp("gates")
    with private_control_plane(work) as cluster:
        wait_for(
            "the default service account",
            lambda: cluster.get("serviceaccount", "default", namespace="default"),
            timeout=120,
        )
        before = os.environ.get("KUBECONFIG")
        os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
        try:
            yield cluster, Kube()
        finally:
            if before is None:
                del os.environ["KUBECONFIG"]
            else:
                os.environ["KUBECONFIG"] = before


def gated_pod(name: str, *gates: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulingGates": [{"name": g} for g in gates],
            "containers": [{"name": "c", "image": "registry.invalid/none:1"}],
        },
    }


def gates_of(cluster: PrivateCluster, name: str) -> list[str]:
    pod = cluster.get("pod", name, namespace="default")
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


@pytest.mark.parametrize(
    ("order", "left"),
    [
        ((GANG_GATE, KUEUE_ADMISSION_GATE), [KUEUE_ADMISSION_GATE]),
        ((KUEUE_ADMISSION_GATE, GANG_GATE, OTHER), [KUEUE_ADMISSION_GATE, OTHER]),
        ((OTHER, GANG_GATE), [OTHER]),
        ((GANG_GATE,), []),
    ],
)
def test_only_kubegans_gate_is_lifted(
    api: tuple[PrivateCluster, Kube], order: tuple[str, ...], left: list[str]
) -> None:
    cluster, kube = api
    name = f"p-{len(order)}-{order.index(GANG_GATE)}"
    kube.create(gated_pod(name, *order))
    kube.lift_gates("default", name)
    assert gates_of(cluster, name) == left
    kube.lift_gates("default", name)  # again (an earlier sync's lift): a no-op
    assert gates_of(cluster, name) == left


def test_a_pod_without_kubegans_gate_keeps_its_gates(api: tuple[PrivateCluster, Kube]) -> None:
    cluster, kube = api
    kube.create(gated_pod("p-foreign", KUEUE_ADMISSION_GATE))
    kube.lift_gates("default", "p-foreign")
    kube.lift_gates("default", "p-gone")  # a pod deleted meanwhile: nothing to do
    assert gates_of(cluster, "p-foreign") == [KUEUE_ADMISSION_GATE]
