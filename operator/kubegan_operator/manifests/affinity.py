"""Where a worker may run: one worker of a job per node, on the node planned for it, in the
planned pool, under the job's spot policy."""

from __future__ import annotations

from typing import Any

from kubegan_api.contract import JOB_NAME_LABEL
from kubegan_api.resources import SpotPolicy
from kubegan_api.spec import GANTrainingJob

from kubegan_operator.foundation.topology import (
    HOSTNAME_LABEL,
    SPOT_LABELS,
    TPU_ACCELERATOR_LABEL,
    TPU_TOPOLOGY_LABEL,
)
from kubegan_operator.placement.plan import Plan


def node_affinity(job: GANTrainingJob, plan: Plan, node: str | None = None) -> dict[str, Any]:
    """Required: the planned pool, the spot policy and, given `node`, that node (the one
    planned for this worker); preferred: the planned nodes.

    A worker is pinned to its planned node because every later plan counts it there: left
    free to take any node of the pool, the scheduler (which spreads, where the planner packs)
    put workers on nodes planned for other jobs, whose gangs then could not be bound and
    waited to be planned again. Pinned, the plan and the scheduler agree; a planned node that
    goes away or fills up makes the operator plan the gang again at once (replan.py)."""
    base: list[dict[str, Any]] = []
    if plan.pool:
        base.append({"key": plan.pool_label, "operator": "In", "values": [plan.pool]})
    tpu = job.spec.resources.tpu
    if tpu is not None:
        base.append({"key": TPU_ACCELERATOR_LABEL, "operator": "In", "values": [tpu.accelerator]})
        base.append({"key": TPU_TOPOLOGY_LABEL, "operator": "In", "values": [tpu.topology]})
    policy = job.spec.placement.spot
    if policy == SpotPolicy.never:
        base += [{"key": k, "operator": "NotIn", "values": [v]} for k, v in SPOT_LABELS.items()]
        terms = [base]
    elif policy == SpotPolicy.required:
        # Node selector terms are ORed: one term per way a node can say it is spot.
        terms = [
            [*base, {"key": k, "operator": "In", "values": [v]}] for k, v in SPOT_LABELS.items()
        ]
    else:
        terms = [base]
    affinity: dict[str, Any] = {}
    # The node by name (a field, not the hostname label, which need not equal the name).
    pin = [{"key": "metadata.name", "operator": "In", "values": [node]}] if node else []
    if any(terms) or pin:
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [
                {**({"matchExpressions": t} if t else {}), **({"matchFields": pin} if pin else {})}
                for t in terms
            ]
        }
    if plan.nodes:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {
                "weight": 50,
                "preference": {
                    "matchExpressions": [
                        {"key": HOSTNAME_LABEL, "operator": "In", "values": list(plan.nodes)}
                    ]
                },
            }
        ]
    return affinity


def planned_node(plan: Plan, index: int) -> str | None:
    """The node worker `index` is pinned to; none while the plan waits for an autoscaler:
    Karpenter refuses to provision for a pod whose affinity names nodes by field (and its
    peers may take the existing free nodes of the pool as well as any)."""
    if plan.waits_for_capacity():
        return None
    return plan.nodes[index] if index < len(plan.nodes) else None


def worker_affinity(job: GANTrainingJob, plan: Plan, index: int) -> dict[str, Any]:
    """One worker of a job per node (required), on the node planned for it (node_affinity)."""
    affinity: dict[str, Any] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {JOB_NAME_LABEL: job.metadata.name}},
                    "topologyKey": HOSTNAME_LABEL,
                }
            ]
        }
    }
    na = node_affinity(job, plan, planned_node(plan, index))
    if na:
        affinity["nodeAffinity"] = na
    return affinity
