"""The labels and annotations that make a job's workers one Kueue plain-pod group."""

from __future__ import annotations

from kubegan_api.contract import (
    KUEUE_POD_GROUP_COUNT_ANNOTATION,
    KUEUE_POD_GROUP_LABEL,
    KUEUE_PRIORITY_CLASS_LABEL,
    KUEUE_QUEUE_LABEL,
    KUEUE_RETRIABLE_IN_GROUP_ANNOTATION,
    KUEUE_ROLE_HASH_ANNOTATION,
    kueue_pod_group,
)
from kubegan_api.spec import GANTrainingJob

from kubegan_operator.placement.plan import Plan

# Every worker is one pod set of Kueue's Workload (their planned nodes differ, so the hash
# Kueue would compute differs per worker: a gang over 8 nodes would exceed its 8 pod sets).
KUEUE_ROLE = "workers"


def kueue_group(
    job: GANTrainingJob, plan: Plan, uid: str | None, attempt: int
) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) that make a job's workers one Kueue plain-pod group, admitted
    whole against its LocalQueue's ClusterQueue or not at all; empty for a job that names no
    queue. Its WorkloadPriorityClass, when the job names one, goes with it."""
    job_labels = job.metadata.labels or {}
    queue = job_labels.get(KUEUE_QUEUE_LABEL)
    if not queue:
        return {}, {}
    labels = {
        KUEUE_QUEUE_LABEL: queue,
        KUEUE_POD_GROUP_LABEL: kueue_pod_group(job.metadata.name, uid, attempt),
    }
    priority = job_labels.get(KUEUE_PRIORITY_CLASS_LABEL)
    if priority:
        labels[KUEUE_PRIORITY_CLASS_LABEL] = priority
    annotations = {
        KUEUE_POD_GROUP_COUNT_ANNOTATION: str(plan.workers),
        KUEUE_ROLE_HASH_ANNOTATION: KUEUE_ROLE,
        KUEUE_RETRIABLE_IN_GROUP_ANNOTATION: "false",
    }
    return labels, annotations
