"""Kueue on the real nodes: a job admitted through a real Kueue
v0.17.1 trains, is preempted by a higher-priority job, checkpoints on SIGTERM, waits to be
admitted again and resumes from its checkpoint, ending bit for bit where the uninterrupted
digits-torch run ended.

Kueue runs as a process of this machine against the e2e control plane (tests/support/kueue.py:
webhooks on 127.0.0.1 with a CA of its own). It manages pods only in this module's namespace
(its `managedJobsNamespaceSelector` and pod webhooks select MANAGED_NAMESPACE_LABEL), and the
module removes what it made afterwards (the namespace, Kueue's objects, its webhook
configurations and CRDs) so the other e2e modules see the cluster as before.

The ClusterQueue's quota is one gang (two workers of 500m CPU and 3Gi): the real nodes have
room for both jobs, so the quota alone decides, and a pending higher-priority Workload
preempts the admitted one (`withinClusterQueue: LowerPriority`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubegan_api.contract import KUEUE_PRIORITY_CLASS_LABEL, KUEUE_QUEUE_LABEL

from tests.e2e.jobs import Job, assert_bitwise_equal, final_weights, resumed_at
from tests.support.control_plane import PrivateCluster
from tests.support.kueue import (
    MANAGED_NAMESPACE_LABEL,
    cluster_queue,
    local_queue,
    resource_flavor,
    running_kueue,
    workload_priority_class,
)
from tests.support.real_nodes import (
    CHECKPOINT_CLAIM,
    EPOCHS,
    JOBS_NS,
    RealCluster,
    Watched,
    digits_job,
    restricted_namespace,
)

pytestmark = pytest.mark.timeout(1200)
NS = "ml-queued"
QUEUE, CLUSTER_QUEUE, FLAVOR = "e2e-team", "e2e-cq", "e2e-real-nodes"
LOW, HIGH = "e2e-low", "e2e-high"
KUEUE_GROUP = "kueue.x-k8s.io"
SHARED_STORAGE_CLASS = "kubegan-local-shared"  # hack/real-node-lib.sh: the RWX volumes' class


def queue_objects() -> list[dict[str, Any]]:
    """The namespace (restricted, managed by Kueue), its checkpoint claim, and the queue:
    quota for one gang of digits_job, two priorities."""
    ns = restricted_namespace(NS)
    key, value = MANAGED_NAMESPACE_LABEL
    ns["metadata"]["labels"][key] = value
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": CHECKPOINT_CLAIM, "namespace": NS},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": SHARED_STORAGE_CLASS,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    return [
        ns,
        claim,
        resource_flavor(FLAVOR),
        cluster_queue(CLUSTER_QUEUE, FLAVOR, gpus=0, cpu="1", memory="6Gi"),
        local_queue(NS, QUEUE, CLUSTER_QUEUE),
        workload_priority_class(LOW, 100),
        workload_priority_class(HIGH, 1000),
    ]


def remove_queue_objects(cluster: PrivateCluster) -> None:
    """The jobs, the namespace and the queue, while Kueue still runs (it takes its finalizers
    off the Workloads and the ClusterQueue)."""
    cluster.kubectl("delete", "ganjob", "--all", "-n", NS, "--timeout=180s", timeout=200)
    cluster.kubectl("delete", "namespace", NS, "--timeout=180s", timeout=200)
    cluster.kubectl("delete", "clusterqueue", CLUSTER_QUEUE, "--ignore-not-found", "--timeout=60s")
    for kind, name in (
        ("resourceflavor", FLAVOR),
        ("workloadpriorityclass", LOW),
        ("workloadpriorityclass", HIGH),
    ):
        cluster.kubectl("delete", kind, name, "--ignore-not-found", "--timeout=60s")


@pytest.fixture(scope="module")
def queued(
    real_cluster: RealCluster, operator_release: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrivateCluster]:
    """Kueue against the e2e control plane, with the queue objects; all of it gone after."""
    view = PrivateCluster(env=real_cluster.env, dir=real_cluster.dir)
    with running_kueue(view, tmp_path_factory.mktemp("kueue-e2e")):
        view.apply(*queue_objects())
        try:
            yield view
        finally:
            remove_queue_objects(view)
    crds = [c["metadata"]["name"] for c in view.get("crd") if c["spec"]["group"] == KUEUE_GROUP]
    view.kubectl("delete", "crd", *crds, "--timeout=120s", timeout=150)


def queued_job(name: str, epochs: int, priority: str) -> dict[str, Any]:
    job = digits_job(name, "pytorch", epochs)
    job["metadata"]["namespace"] = NS
    job["metadata"]["labels"] = {KUEUE_QUEUE_LABEL: QUEUE, KUEUE_PRIORITY_CLASS_LABEL: priority}
    return job


def unschedulable(st: dict[str, Any]) -> dict[str, Any] | None:
    return next(
        (
            c
            for c in st.get("conditions", [])
            if c["type"] == "Unschedulable" and c["status"] == "True"
        ),
        None,
    )


def test_kueue_preemption_checkpoints_and_resumes_exactly(
    real_cluster: RealCluster, trained: dict[str, Watched], queued: PrivateCluster
) -> None:
    """Low priority admitted and training (epoch 3); a high-priority job arrives; Kueue
    evicts the low gang (SIGTERM, checkpoint): 1 preemption, 0 restarts, never Failed; it
    waits QueuedByKueue while the high one runs, is admitted again when that one finishes,
    resumes at its last checkpoint and ends bitwise equal to the uninterrupted run."""
    reference = trained["digits-torch"].final["status"]
    assert reference["phase"] == "Succeeded", reference
    epochs = EPOCHS["digits-torch"]
    low = Job(real_cluster, queued_job("queued-low", epochs, LOW)).apply()
    low.wait("admitted and Running", lambda st: st.get("phase") == "Running", 300)
    low.wait_training(epoch=3)
    high = Job(real_cluster, queued_job("queued-high", 2, HIGH)).apply()

    st = low.wait("the preemption counted", lambda st: st.get("preemptions") == 1 and st, 180)
    assert st["restarts"] == 0, st
    cond = low.wait(
        "the new gang QueuedByKueue",
        lambda st: (c := unschedulable(st)) and c["reason"] == "QueuedByKueue" and c,
        180,
    )
    assert f"LocalQueue {QUEUE}, ClusterQueue {CLUSTER_QUEUE}: " in cond["message"], cond
    # The evicted gang is gone (the new one is held by Kueue): its SIGTERM checkpoint is in.
    saved = low.checkpoints()[-1]
    assert saved >= (2, 0), low.checkpoints()
    high.wait("admitted and Running", lambda st: st.get("phase") == "Running", 300)
    assert high.finish()["preemptions"] == 0

    final = low.finish()
    assert (final["preemptions"], final["restarts"]) == (1, 0), final
    assert resumed_at(low.log(0)) == saved, low.log(0)[:3000]
    preempted = [e["message"] for e in low.events() if e["reason"] == "Preempted"]
    # Kueue's own reason, from the evicted workers' TerminationTarget condition.
    assert len(preempted) == 1 and "WorkloadEvicted" in preempted[0], preempted

    ran = real_cluster.claim_dir(CHECKPOINT_CLAIM, JOBS_NS) / "digits-torch"
    assert_bitwise_equal(low.final_state(epochs), final_weights(ran, epochs))
