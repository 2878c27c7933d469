"""The view a sync reads: kopf's indexes (as handlers receive them) plus the operator's
expectations, answering reconcile's questions, so in steady state the operator sends no
request but its watches."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from kubegan_api.conditions import ConditionType, Reason
from kubegan_api.contract import PLANNED_NODE_ANNOTATION
from kubegan_api.status import Phase

from kubegan_operator.foundation.topology import Inventory, NodeInfo, PodUsage, with_usage
from kubegan_operator.placement.replan import PinnedWorker, unbindable
from kubegan_operator.runtime.expectations import Expectations
from kubegan_operator.runtime.free_capacity import FreeCapacity
from kubegan_operator.runtime.indexes import JobKey, NodeEntry, resource_version, stored
from kubegan_operator.runtime.readiness import NOT_READY_GRACE_SECONDS, NodeReadiness


@dataclass
class View:
    """kopf's indexes (as handlers receive them) plus the operator's expectations."""

    jobs: Mapping[JobKey, Any]
    nodes: Mapping[str, Any]
    usage: Mapping[str, Any]  # node -> PodUsage of every pod holding resources there
    job_pods: Mapping[JobKey, Any]
    services: Mapping[JobKey, Any]
    config_maps: Mapping[JobKey, Any]
    expectations: Expectations
    capacity: FreeCapacity  # fed by the node and pod-usage index handlers
    # The jobs' NetworkPolicies as indexed (None: not watched, the operator makes none).
    network_policies: Mapping[JobKey, Any] | None = None

    def job(self, key: JobKey) -> dict[str, Any] | None:
        seen = stored(self.jobs.get(key))
        exp = self.expectations.jobs.get(key)
        written = exp.written if exp else None
        if seen is None:
            return None
        if written is not None:
            if resource_version(written) > resource_version(seen):
                return written
            exp.written = None  # type: ignore[union-attr]  # the watch caught up
        return seen

    def pods(self, key: JobKey) -> list[dict[str, Any]]:
        return list(self.job_pods.get(key) or ())

    def has(self, kind: str, key: JobKey) -> bool:
        if kind == "NetworkPolicy":
            return key in (self.network_policies or {})
        return key in (self.services if kind == "Service" else self.config_maps)

    def network_policy(self, key: JobKey) -> dict[str, Any] | None:
        """A job's NetworkPolicy as the watch shows it ({resourceVersion, spec}); None when
        not shown."""
        seen: dict[str, Any] | None = stored((self.network_policies or {}).get(key))
        return seen

    def node_ready(self, now: datetime) -> Mapping[str, bool]:
        """Every node: Ready, or NotReady for less than the grace period. Read lazily: a
        reconcile asks about its own workers' nodes, and building the whole map for each one
        was 6 % of the operator's time at 1000 nodes."""
        return NodeReadiness(self.nodes, now)

    def grace_left(self, nodes: Iterable[str], now: datetime) -> float | None:
        """Seconds until the first of `nodes` now in its NotReady grace stops being usable."""
        left = None
        for name in set(nodes):
            entry = stored(self.nodes.get(name))
            if entry is None or entry.ready or entry.not_ready_since is None:
                continue
            rest = NOT_READY_GRACE_SECONDS - (now - entry.not_ready_since).total_seconds()
            if rest > 0:
                left = rest if left is None else min(left, rest)
        return left

    def inventory(
        self, exclude_job: JobKey | None = None, extra: Iterable[PodUsage] = ()
    ) -> Inventory:
        """Free capacity now: the indexed nodes, less what indexed pods, the operator's
        not-yet-seen new workers and `extra` (pods outside the watched namespaces) hold."""
        reserved: list[PodUsage] = []
        for exp in self.expectations.jobs.values():
            for name, u in list(exp.reserved.items()):
                if self.capacity.holds((u.namespace, name)):
                    del exp.reserved[name]  # the watch shows it now
                else:
                    reserved.append(u)
        return self.capacity.inventory(exclude_job, [*reserved, *extra])

    def unbindable(self, key: JobKey, pods: Iterable[Mapping[str, Any]]) -> str | None:
        """Why a worker of the job's that is not bound yet can no longer be bound on its
        planned node (replan.unbindable), from the indexes; None when each still can."""
        workers = [w for w in map(self._pinned_worker, pods) if w is not None]
        if not workers:
            return None
        nodes: dict[str, NodeInfo | None] = {}
        for name in {w.node for w in workers}:
            entry = stored(self.nodes.get(name))
            if entry is not None:  # a node gone is left out: replan.unbindable says so
                nodes[name] = self._room_besides(name, entry, key)
        return unbindable(workers, nodes)

    def _pinned_worker(self, pod: Mapping[str, Any]) -> PinnedWorker | None:
        """The pod as a worker planned on a node and not bound yet (nor being deleted), with
        what the usage index says it requests; None for any other pod."""
        meta = pod.get("metadata") or {}
        planned = (meta.get("annotations") or {}).get(PLANNED_NODE_ANNOTATION)
        if not planned or (pod.get("spec") or {}).get("nodeName"):
            return None
        if meta.get("deletionTimestamp"):
            return None
        name = meta.get("name", "")
        usage = next((u for u in self.usage.get(planned) or () if u.name == name), None)
        return PinnedWorker(name, planned, usage.requests if usage else {})

    def _room_besides(self, name: str, entry: NodeEntry, key: JobKey) -> NodeInfo | None:
        """The node's capacity less what pods *bound* there by other jobs than `key` hold;
        None when the node cannot be read."""
        if entry.capacity is None:
            return None
        used: dict[str, Decimal] = {}
        for u in self.usage.get(name) or ():
            if u.bound and (u.namespace, u.job) != key:
                for resource, amount in u.requests.items():
                    used[resource] = used.get(resource, Decimal(0)) + amount
        return with_usage(entry.capacity, used)

    def jobs_on(self, node: str) -> set[JobKey]:
        """Jobs with a worker holding resources on `node`."""
        return {(u.namespace, u.job) for u in self.usage.get(node) or () if u.job}

    def waiting_jobs(self) -> set[JobKey]:
        """Jobs that found no placement (Unschedulable, NoFit): only new capacity helps them.
        A gang waiting for the scheduler, or for its old gang to go, is not one of them: its
        own pods' events and timers bring it back, and re-planning it would change nothing."""
        out = set()
        for key, store in self.jobs.items():
            status = (stored(store) or {}).get("status") or {}
            if status.get("phase") in (Phase.succeeded, Phase.failed, Phase.suspended):
                continue
            if any(
                c.get("type") == ConditionType.unschedulable
                and c.get("status") == "True"
                and c.get("reason") == Reason.no_fit
                for c in status.get("conditions") or []
            ):
                out.add(key)
        return out

    def all_jobs(self) -> list[JobKey]:
        return list(self.jobs.keys())
