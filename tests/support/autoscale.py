"""An autoscaled cluster for kubegan: a control plane of its own, Karpenter (KWOK
provider) with GPU NodePools at zero nodes, the CRD, and the operator planning on the NodePools
(--karpenter). Shared by tests/cluster/test_autoscaling.py and bench/autoscale.py."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubegan_api.contract import JOB_NAME_LABEL

from tests.support.control_plane import PrivateCluster, private_control_plane
from tests.support.karpenter import Karpenter, running_karpenter
from tests.support.kube import ROOT, Operator

# KWOK's stage (hack/cluster-up.sh) that completes a pod labelled so.
COMPLETE_LABEL = "pod-complete.stage.kwok.x-k8s.io=true"
# Karpenter's log message for one provisioning decision ("nodeclaims": how many nodes).
DECISION = "computed new nodeclaim(s) to fit pod(s)"
CREATED = "created nodeclaim"


@dataclass
class Autoscaled:
    cluster: PrivateCluster
    karpenter: Karpenter
    operator: Operator

    def namespace(self) -> str:
        ns = f"t-{uuid.uuid4().hex[:8]}"
        self.cluster.kubectl("create", "namespace", ns)
        return ns

    def status(self, ns: str, name: str) -> dict[str, Any]:
        return (self.cluster.get("gantrainingjob", name, ns) or {}).get("status") or {}

    def workers(self, ns: str, name: str) -> list[dict[str, Any]]:
        """The job's pods that are not being deleted."""
        pods = self.cluster.get("pods", namespace=ns, selector=f"{JOB_NAME_LABEL}={name}")
        return [p for p in pods if not p["metadata"].get("deletionTimestamp")]

    def describe(self, ns: str, name: str) -> str:
        """The job's phase, conditions, workers and the Karpenter nodes, for a failure message."""
        st = self.status(ns, name)
        conds = [
            (c["type"], c["status"], c.get("reason"), c.get("message"))
            for c in st.get("conditions", [])
        ]
        pods = [
            (p["metadata"]["name"], p["spec"].get("nodeName"), (p.get("status") or {}).get("phase"),
             p["metadata"].get("deletionTimestamp"))
            for p in self.cluster.get("pods", namespace=ns, selector=f"{JOB_NAME_LABEL}={name}")
        ]  # fmt: skip
        nodes = [
            (n["metadata"]["name"], n["metadata"].get("deletionTimestamp"), n["spec"].get("taints"))
            for n in self.karpenter.nodes()
        ]
        return (
            f"phase {st.get('phase')} attempt {st.get('attempt')} preemptions "
            f"{st.get('preemptions')}\nconditions {conds}\npods {pods}\nnodes {nodes}"
        )

    def events(self, ns: str) -> str:
        return self.cluster.kubectl("get", "events", "-n", ns).stdout

    def decisions(self, pool: str = "") -> list[dict[str, Any]]:
        """Karpenter's scale-up decisions so far (for `pool`), from its JSON log."""
        return scale_up_decisions(self.karpenter.process.log_path.read_text(errors="replace"), pool)


def scale_up_decisions(log: str, pool: str = "") -> list[dict[str, Any]]:
    """Each provisioning decision in Karpenter's JSON log, with the NodePools its nodeclaims
    came from (`pools`, from the "created nodeclaim" lines of the same reconcile); only those
    that added nodes to `pool` when given."""
    entries = []
    for line in log.splitlines():
        if '"message":"' + DECISION not in line and CREATED not in line:
            continue
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    decisions = {e["reconcileID"]: {**e, "pools": []} for e in entries if e["message"] == DECISION}
    for e in entries:
        if e["message"] == CREATED and e.get("reconcileID") in decisions:
            decisions[e["reconcileID"]]["pools"].append((e.get("NodePool") or {}).get("name"))
    return [d for d in decisions.values() if not pool or pool in d["pools"]]


def gpu_job(
    name: str,
    namespace: str,
    accelerator: str,
    *,
    workers: int = 2,
    gpus_per_worker: int = 8,
    capacity_timeout: int = 600,
) -> dict[str, Any]:
    return {
        "apiVersion": "kubegan.io/v1alpha1",
        "kind": "GANTrainingJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "framework": "pytorch",
            "model": {"name": "dcgan"},
            "training": {"epochs": 2},
            "resources": {
                "workers": workers,
                "gpusPerWorker": gpus_per_worker,
                "accelerator": accelerator,
            },
            "scheduling": {"capacityTimeoutSeconds": capacity_timeout},
        },
    }


@contextmanager
def autoscaled_cluster(
    work: Path,
    nodepools: list[dict[str, Any]],
    *,
    batch_idle: str = "2s",
    batch_max: str = "5s",
) -> Iterator[Autoscaled]:
    """Control plane, Karpenter with `nodepools`, the CRD and a `kubegan operator --karpenter`,
    all stopped on exit."""
    with (
        private_control_plane(work) as cluster,
        running_karpenter(cluster, work, batch_idle=batch_idle, batch_max=batch_max) as karpenter,
    ):
        cluster.kubectl("apply", "-f", str(ROOT / "crds" / "gantrainingjobs.kubegan.io.yaml"))
        cluster.apply(*nodepools)
        operator = Operator(work, "--karpenter", kubeconfig=cluster.kubeconfig)
        operator.start()
        try:
            yield Autoscaled(cluster, karpenter, operator)
        finally:
            operator.stop()
