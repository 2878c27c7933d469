"""Which of a job's pods to delete, and which of those to force: a pod on a gone or NotReady
node can never be finalized by a kubelet, and one that has ended has nothing left to stop."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubegan_api.resources import CleanPodPolicy
from kubegan_api.status import PodPhase


def pod_name(pod: Mapping[str, Any]) -> str:
    return (pod.get("metadata") or {}).get("name", "")


def must_force(pod: Mapping[str, Any], node_ready: Mapping[str, bool]) -> bool:
    """Force-delete (grace 0) pods on a gone or NotReady node: no kubelet will ever finalize
    them. And pods that have ended (Succeeded or Failed, which the kubelet reports once every
    container has exited and will not restart one): nothing of them runs, so waiting for the
    kubelet's own cleanup (volumes, cgroups) before it lets the pod go only delays the next
    gang's pod of the same name, by 1-2 s on every restart. Kubernetes' pod garbage
    collector deletes ended pods the same way."""
    if (pod.get("status") or {}).get("phase") in (PodPhase.succeeded, PodPhase.failed):
        return True
    node = (pod.get("spec") or {}).get("nodeName")
    return bool(node) and not node_ready.get(node, False)


def clean_pods(
    pods: Sequence[Mapping[str, Any]],
    policy: CleanPodPolicy,
    node_ready: Mapping[str, bool],
    *,
    finished: bool = False,
) -> list[tuple[str, bool]]:
    out = []
    for p in pods:
        if (p.get("metadata") or {}).get("deletionTimestamp") and not must_force(p, node_ready):
            continue
        phase = (p.get("status") or {}).get("phase")
        ended = phase in (PodPhase.succeeded, PodPhase.failed)
        if policy == CleanPodPolicy.all or (policy == CleanPodPolicy.running and not ended):
            out.append((pod_name(p), must_force(p, node_ready)))
    return out
