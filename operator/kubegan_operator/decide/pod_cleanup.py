"""Which of a job's pods to delete, and which of those to force: a pod on a gone or NotReady
node can never be finalized by a kubelet."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubegan_api.resources import CleanPodPolicy
from kubegan_api.status import PodPhase


def pod_name(pod: Mapping[str, Any]) -> str:
    return (pod.get("metadata") or {}).get("name", "")


def must_force(pod: Mapping[str, Any], node_ready: Mapping[str, bool]) -> bool:
    """Pods on a gone or NotReady node can never be finalized by a kubelet: force-delete."""
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
