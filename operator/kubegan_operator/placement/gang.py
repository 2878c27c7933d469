"""How a gang is held until it is whole (issue 25): kubegan's own scheduling gate (`gates`, the
default) or Kubernetes' native gang scheduling (`native`: scheduling.k8s.io/v1alpha2, alpha in
Kubernetes 1.36, feature gates GenericWorkload and GangScheduling).

With `native`, each gang attempt is one PodGroup whose minCount is the gang's size, and every
worker names it in `spec.schedulingGroup.podGroupName` instead of carrying kubegan's gate: the
scheduler holds the workers until all exist, then binds all of them or none. The workers keep
the plan's node affinity (render.node_affinity), so the gang still lands on the planned nodes.

Pure: manifests in, manifests out. The operator creates them; reconcile decides when.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from kubegan_api.contract import GANG_GATE
from kubegan_api.spec import GANTrainingJob

from kubegan_operator.placement.render import labels_for, owner_references

POD_GROUP_API = "scheduling.k8s.io/v1alpha2"
POD_GROUP_KIND = "PodGroup"
POD_GROUP_PLURAL = "podgroups"


class GangMode(StrEnum):
    """The operator's --gang (the chart's operator.gang)."""

    gates = "gates"
    native = "native"


def pod_group_name(job: str, attempt: int) -> str:
    """One PodGroup per attempt: a pod's group is immutable, and the next attempt's gang may
    have another size."""
    return f"{job}-attempt-{attempt}"


def render_pod_group(
    job: GANTrainingJob, workers: int, uid: str | None, attempt: int
) -> dict[str, Any]:
    """The PodGroup of one gang attempt, owned by the job (deleted with it by the garbage
    collector)."""
    meta: dict[str, Any] = {
        "name": pod_group_name(job.metadata.name, attempt),
        "namespace": job.metadata.namespace,
        "labels": labels_for(job),
    }
    refs = owner_references(job, uid)
    if refs:
        meta["ownerReferences"] = refs
    return {
        "apiVersion": POD_GROUP_API,
        "kind": POD_GROUP_KIND,
        "metadata": meta,
        "spec": {"schedulingPolicy": {"gang": {"minCount": workers}}},
    }


def join_pod_group(pod: Mapping[str, Any], group: str) -> dict[str, Any]:
    """`pod` (as render_pod renders it) as a member of `group`, without kubegan's gate: the
    scheduler, not the operator, holds it until the gang is whole. Other gates stay."""
    spec = dict(pod["spec"])  # a new spec; what it holds is shared with `pod`, not changed
    gates = [g for g in spec.pop("schedulingGates", []) if g.get("name") != GANG_GATE]
    if gates:
        spec["schedulingGates"] = gates
    spec["schedulingGroup"] = {"podGroupName": group}
    return {**pod, "spec": spec}


def held_natively(
    job: GANTrainingJob,
    pods: list[dict[str, Any]],
    workers: int,
    uid: str | None = None,
    attempt: int = 0,
) -> list[dict[str, Any]]:
    """Workers `pods` of a gang of `workers` as members of the attempt's PodGroup, which
    comes first in the list (what the operator creates with `--gang native`)."""
    group = render_pod_group(job, workers, uid, attempt)
    name = group["metadata"]["name"]
    return [group, *(join_pod_group(p, name) for p in pods)]


def pod_group_of(pod: Mapping[str, Any]) -> str | None:
    """The PodGroup a worker joined, if it joined one."""
    group = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    return str(group) if group else None
