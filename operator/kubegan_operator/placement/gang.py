"""How a gang is held until it is whole: kubegan's own scheduling gate (`gates`, the default)
or Kubernetes' native gang scheduling (`native`: scheduling.k8s.io/v1alpha2, alpha in
Kubernetes 1.36, feature gates GenericWorkload and GangScheduling).

With `native`, each gang attempt is one PodGroup whose minCount is the gang's size, and every
worker names it in `spec.schedulingGroup.podGroupName` instead of carrying kubegan's gate: the
scheduler holds the workers until all exist, then binds all of them or none. The workers keep
the plan's node affinity (manifests/affinity.py), so the gang still lands on the planned
nodes. The PodGroup and its members are rendered in manifests/pod_groups.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

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


def pod_group_of(pod: Mapping[str, Any]) -> str | None:
    """The PodGroup a worker joined, if it joined one."""
    group = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    return str(group) if group else None
