"""What one sync observed of a job: reconcile's whole input (observe -> decide -> apply).

The controller builds a `JobSnapshot` from its indexes (observe.py), `reconcile()` turns it
into a `Decision` without reading anything else (decide), and the controller carries the
decision out (apply.py). Frozen, so a step cannot change what the others see.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubegan_api.spec import GANTrainingJobSpec

from kubegan_operator.foundation.kueue import QueueWait
from kubegan_operator.foundation.trainer_metrics import ProgressUpdate
from kubegan_operator.manifests.network_policy import NetworkPolicySettings
from kubegan_operator.placement.gang import GangMode
from kubegan_operator.placement.plan import Plan

# A placement for the job's (validated) spec against the free capacity now.
Planner = Callable[[GANTrainingJobSpec], Plan]


@dataclass(frozen=True)
class WorkerIdentity:
    """A namespace's default ServiceAccount for workers, and the labels its workers need
    with it (AKS: azure.workload.identity/use, which makes the webhook project the token)."""

    service_account: str
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class JobSnapshot:
    job: Mapping[str, Any]  # as the watch shows it, or as this operator's last write returned it
    pods: Sequence[Mapping[str, Any]]  # every pod the job owns (not a stray with its label)
    node_ready: Mapping[str, bool]  # every node the cluster has: usable now
    now: datetime
    have_service: bool  # shown by the watch, or created and not shown yet
    have_config_map: bool
    # Called only by the decision that plans a gang, so the capacity is read only then. It is
    # still the capacity of the instant the snapshot was taken: nothing else runs on the
    # event loop between observe and decide.
    plan: Planner
    progress: ProgressUpdate | None = None  # what worker 0's metrics said, when read
    # Why a worker not bound yet can no longer be bound where it was planned (replan.py).
    unbindable: str | None = None
    # Why Kueue holds the gang (its admission gate on a worker), read from its Workload.
    queued: QueueWait | None = None
    # How a gang is held until it is whole: kubegan's gate or a native PodGroup (--gang).
    gang: GangMode = GangMode.gates
    # The LocalQueue the operator names for the job's namespace (--default-queue, the chart's
    # kueue.defaultQueues): the queue of a job without its own kueue.x-k8s.io/queue-name.
    default_queue: str | None = None
    # Who the workers of a job naming no service account run as in this namespace
    # (--worker-identity, the chart's workerIdentity): a workload identity for its bucket.
    default_identity: WorkerIdentity | None = None
    # What the job's NetworkPolicy admits (--network-policy); None: the operator makes none.
    network_policy: NetworkPolicySettings | None = None
    have_network_policy: bool = False  # shown by the watch, or created and not shown yet
    # It as the watch shows it, {resourceVersion, spec}, so a policy changed is set back;
    # None: not shown, or shown as it was before the operator set it back.
    network_policy_seen: Mapping[str, Any] | None = None

    @property
    def uid(self) -> str | None:
        return (self.job.get("metadata") or {}).get("uid")
