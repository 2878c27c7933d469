"""The worker pods of a job's gang (DESIGN §4), and every object a plan needs at once.

Pure: given a job, its plan and (when known) its uid, return the manifests. The operator
creates them; `kubegan render` prints them.
"""

from __future__ import annotations

from typing import Any

from kubegan_api.contract import (
    ATTEMPT_LABEL,
    GANG_GATE,
    PLANNED_NODE_ANNOTATION,
    PLANNED_NODES_ANNOTATION,
    STRATEGY_ANNOTATION,
    WORKER_INDEX_LABEL,
    worker_name,
)
from kubegan_api.spec import GANTrainingJob

from kubegan_operator.manifests.affinity import planned_node, worker_affinity
from kubegan_operator.manifests.container import trainer_container, worker_memory
from kubegan_operator.manifests.kueue_group import kueue_group
from kubegan_operator.manifests.network_policy import NetworkPolicySettings, render_network_policy
from kubegan_operator.manifests.objects import object_metadata, render_config_map, render_service
from kubegan_operator.manifests.template_overlay import apply_pod_template
from kubegan_operator.manifests.volumes import worker_volumes
from kubegan_operator.placement.eligibility import job_tolerations
from kubegan_operator.placement.plan import Plan

RUN_AS_USER = 1000
TERMINATION_GRACE_SECONDS = 60


def worker_metadata(
    job: GANTrainingJob, plan: Plan, index: int, uid: str | None, attempt: int
) -> dict[str, Any]:
    meta = object_metadata(
        job,
        worker_name(job.metadata.name, index),
        uid,
        **{WORKER_INDEX_LABEL: str(index), ATTEMPT_LABEL: str(attempt)},
    )
    meta["annotations"] = {
        # Where the planner put this worker: other jobs' plans count it there until it binds.
        PLANNED_NODE_ANNOTATION: planned_node(plan, index) or "",
        PLANNED_NODES_ANNOTATION: ",".join(plan.nodes),
        STRATEGY_ANNOTATION: plan.strategy,
    }
    return meta


def render_pod(
    job: GANTrainingJob,
    plan: Plan,
    index: int,
    *,
    uid: str | None = None,
    attempt: int = 0,
    cost_rate_per_hour: float | None = None,
    image: str | None = None,
) -> dict[str, Any]:
    """Worker `index` of the gang `plan` places, in attempt `attempt`."""
    name = job.metadata.name
    volumes, mounts = worker_volumes(job, worker_memory(job, plan))
    container = trainer_container(
        job, plan, index, mounts, image=image, cost_rate_per_hour=cost_rate_per_hour
    )
    selector = dict(job.spec.placement.node_selector)
    pod_spec: dict[str, Any] = {
        "hostname": worker_name(name, index),
        "subdomain": name,
        "restartPolicy": "Never",  # the operator restarts the whole gang, never one worker
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        # A gang of one is whole the moment it is created: its gate would only cost a
        # round trip to lift it (most single-node jobs).
        # Nor is a gang waiting for an autoscaler gated: a gated pod is invisible to it.
        **(
            {"schedulingGates": [{"name": GANG_GATE}]}
            if plan.workers > 1 and not plan.waits_for_capacity()
            else {}
        ),
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_USER,
            "fsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "affinity": worker_affinity(job, plan, index),
        "tolerations": job_tolerations(job.spec),
        "containers": [container],
        "volumes": volumes,
        **({"nodeSelector": selector} if selector else {}),
    }
    meta = worker_metadata(job, plan, index, uid, attempt)
    queue_labels, queue_annotations = kueue_group(job, plan, uid, attempt)
    meta["labels"].update(queue_labels)
    meta["annotations"].update(queue_annotations)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec}
    if job.spec.pod_template is not None:
        apply_pod_template(pod, job.spec.pod_template)
    return pod


def render_all(
    job: GANTrainingJob,
    plan: Plan,
    *,
    uid: str | None = None,
    attempt: int = 0,
    image: str | None = None,
    network_policy: NetworkPolicySettings | None = None,
) -> list[dict[str, Any]]:
    """The job's objects for `plan`, as the operator creates them: its NetworkPolicy too
    unless `network_policy` is None (the operator's --no-network-policy)."""
    if not plan.feasible:
        raise ValueError(f"cannot render an infeasible plan: {plan.reason}")
    return [
        render_service(job, plan, uid),
        render_config_map(job, uid),
        *([render_network_policy(job, network_policy, uid)] if network_policy else []),
        *(
            render_pod(job, plan, i, uid=uid, attempt=attempt, image=image)
            for i in range(plan.workers)
        ),
    ]
