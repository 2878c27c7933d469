"""A native gang's manifests: the PodGroup of one gang attempt, and its workers as members
of it (placement/gang.py says when a gang is held so).

Pure: manifests in, manifests out. The operator creates them; reconcile decides when.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubegan_api.contract import GANG_GATE
from kubegan_api.spec import GANTrainingJob

from kubegan_operator.manifests.objects import labels_for, owner_references
from kubegan_operator.placement.gang import POD_GROUP_API, POD_GROUP_KIND, pod_group_name


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
