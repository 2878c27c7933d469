"""What one sync observes of a job (observe, before decide and apply): a `JobSnapshot`.

Everything comes from the indexes and the operator's own expectations, with two reads that
no index can hold: worker 0's training progress (HTTP, for a running job) and, for an
operator watching only some namespaces, the pods of the others (they hold GPUs too).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from kubegan_api.contract import (
    ATTEMPT_LABEL,
    KUEUE_POD_GROUP_LABEL,
    KUEUE_QUEUE_LABEL,
    config_map_name,
    network_policy_name,
    service_name,
)
from kubegan_api.spec import GANTrainingJobSpec
from kubegan_api.status import Phase

from kubegan_operator.api.pricing import PriceTable
from kubegan_operator.decide.snapshot import JobSnapshot, Planner, WorkerIdentity
from kubegan_operator.foundation.kueue import QueueWait, queue_wait
from kubegan_operator.foundation.podstate import queued_by_kueue
from kubegan_operator.foundation.pools import PoolTemplate
from kubegan_operator.foundation.topology import PodUsage, pod_usage
from kubegan_operator.manifests.network_policy import NetworkPolicySettings
from kubegan_operator.placement.gang import GangMode
from kubegan_operator.placement.plan import Plan
from kubegan_operator.placement.planner import plan
from kubegan_operator.runtime.expectations import Expectations
from kubegan_operator.runtime.indexes import JobKey
from kubegan_operator.runtime.progress_reader import ProgressReader
from kubegan_operator.runtime.threads import ApiThreads
from kubegan_operator.runtime.view import View

# Pods outside the watched namespaces (only with --namespace) are listed at most this often,
# and only when a job is about to be planned.
FOREIGN_PODS_SECONDS = 30.0
# A job Kueue holds reads its Workload at most this often (reconcile polls it as often).
KUEUE_READ_SECONDS = 5.0


class Observer:
    def __init__(
        self,
        kube: Any,
        expectations: Expectations,
        prices: PriceTable,
        namespaces: list[str] | None,
        progress: ProgressReader,
        threads: ApiThreads,
        pools: Callable[[], Sequence[PoolTemplate]] = tuple,
        gang: GangMode = GangMode.gates,
        default_queues: Mapping[str, str] | None = None,
        identities: Mapping[str, WorkerIdentity] | None = None,
        network_policy: NetworkPolicySettings | None = None,
    ) -> None:
        self.kube, self.expectations, self.prices = kube, expectations, prices
        # What every job's NetworkPolicy admits (--network-policy); None: no policies.
        self.network_policy = network_policy
        self.gang = gang
        # namespace -> the LocalQueue of jobs there that name none (--default-queue).
        self.default_queues = dict(default_queues or {})
        # namespace -> who workers of jobs naming no service account run as (--worker-identity).
        self.identities = dict(identities or {})
        self.pools = pools
        self.namespaces, self.progress, self.threads = namespaces, progress, threads
        self.view: View | None = None  # kopf's indexes, once it hands them over
        self._foreign: tuple[float, list[PodUsage]] = (-FOREIGN_PODS_SECONDS, [])
        self._queued: dict[JobKey, tuple[float, QueueWait]] = {}

    async def observe(
        self, key: JobKey, job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]
    ) -> JobSnapshot:
        """The snapshot of `job` (as the view gave it, or as the last status write returned
        it) with `pods` (every pod carrying its label)."""
        view = self.view
        assert view is not None
        uid = (job.get("metadata") or {}).get("uid")
        # Only pods this job owns: a stray pod carrying the label is not ours to delete.
        owned = tuple(p for p in pods if _owned_by(p, uid))
        phase = (job.get("status") or {}).get("phase")
        progress = None
        if phase == Phase.running:
            progress = await self.threads.run(self.progress.read, key, job, owned)
        extra: list[PodUsage] = []
        if self.namespaces and not owned and phase not in (Phase.succeeded, Phase.failed):
            extra = await self._foreign_usage()
        queued = await self._queue_wait(key, job, owned)
        # From here on nothing is awaited: the indexes are read at one instant.
        now = datetime.now(UTC)
        have = self._shared_objects(view, key)
        return JobSnapshot(
            job=job,
            pods=owned,
            node_ready=view.node_ready(now),
            now=now,
            have_service="Service" in have,
            have_config_map="ConfigMap" in have,
            network_policy=self.network_policy,
            have_network_policy="NetworkPolicy" in have,
            network_policy_seen=self._network_policy(view, key),
            plan=self._planner(view, key, extra),
            progress=progress,
            unbindable=view.unbindable(key, owned),
            queued=queued,
            gang=self.gang,
            default_queue=self.default_queues.get(key[0]),
            default_identity=self.identities.get(key[0]),
        )

    async def _queue_wait(
        self, key: JobKey, job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]
    ) -> QueueWait | None:
        """Why Kueue holds the current gang, when its admission gate is on a worker: its
        Workload and LocalQueue are read (at most every KUEUE_READ_SECONDS per job; nothing
        watches them, reconcile polls while it waits)."""
        attempt = str((job.get("status") or {}).get("attempt", 0))
        held = [p for p in pods if queued_by_kueue(p) and _labels(p).get(ATTEMPT_LABEL) == attempt]
        if not held:
            self._queued.pop(key, None)
            return None
        labels = _labels(held[0])
        group, queue = labels.get(KUEUE_POD_GROUP_LABEL, ""), labels.get(KUEUE_QUEUE_LABEL, "")
        read_at, wait = self._queued.get(key, (0.0, None))
        if wait is None or time.monotonic() - read_at >= KUEUE_READ_SECONDS:
            objs = await self.threads.run(self.kube.kueue_objects, key[0], group, queue)
            wait = queue_wait(queue, *objs)
            self._queued[key] = (time.monotonic(), wait)
        return wait

    def _shared_objects(self, view: View, key: JobKey) -> set[str]:
        """The job's Service, ConfigMap and NetworkPolicy kinds that exist: shown by the
        watch, or created (or found there) by this or an earlier sync and not shown yet.
        Asking the apiserver again for one the watch lagged on was a 409 for one job in seven
        at 1000 nodes."""
        namespace, name = key
        objects = [("Service", service_name(name)), ("ConfigMap", config_map_name(name))]
        if self.network_policy is not None:
            objects.append(("NetworkPolicy", network_policy_name(name)))
        shown = {kind for kind, obj in objects if view.has(kind, (namespace, obj))}
        return shown | self.expectations.unseen_made(key, shown)

    def _network_policy(self, view: View, key: JobKey) -> dict[str, Any] | None:
        """The job's policy as the watch shows it, unless that is the version this operator
        set back and the watch does not show the result yet."""
        seen = view.network_policy((key[0], network_policy_name(key[1])))
        if seen is None or self.expectations.set_back(key, seen["resourceVersion"]):
            return None
        return seen

    def _planner(self, view: View, key: JobKey, extra: list[PodUsage]) -> Planner:
        def plan_now(spec: GANTrainingJobSpec) -> Plan:
            # The job's own pods are left out: a gang planned again may reuse their room.
            inventory = view.inventory(exclude_job=key, extra=extra)
            return plan(spec, inventory, self.prices, self.pools())

        return plan_now

    async def _foreign_usage(self) -> list[PodUsage]:
        """Pods outside the watched namespaces that hold node resources (namespaced mode)."""
        fetched, usages = self._foreign
        if time.monotonic() - fetched < FOREIGN_PODS_SECONDS:
            return usages
        pods = await self.threads.run(self.kube.bound_pods)
        watched = set(self.namespaces or ())
        usages = [
            u
            for p in pods
            if (p.get("metadata") or {}).get("namespace") not in watched
            and isinstance(u := pod_usage(p), PodUsage)
        ]
        self._foreign = (time.monotonic(), usages)
        return usages


def _labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def _owned_by(pod: Mapping[str, Any], uid: str | None) -> bool:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == uid for r in refs)
